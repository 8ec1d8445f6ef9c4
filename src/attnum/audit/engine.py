"""The audit's engine, in this process: probes run against a target, one row per probe and dtype.

A probe's row is its worst case (fail > error > note > pass > unsupported; ties broken by how much
of the bound the error used), so the table shows the three numbers of the case that matters, its
margin (error / bound) and the case's label in the note. Every case is kept for --json. An audit in
which the target refused every case tested nothing: it is reported unavailable, never passed.

:mod:`attnum.audit.runner` (``run_audit``) drives it in this process or, through
:mod:`attnum.audit.isolate`, in child processes; both import this module and neither imports the
other's parent, so there is no import circle.
"""

from __future__ import annotations

import dataclasses
import math
import platform
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnum.audit.config import AuditConfig
from attnum.audit.harness import Case, Probe, ProbeContext, raised
from attnum.audit.probes import select
from attnum.audit.verdict import FAILING, NEAR_BOUND, NO_MARGIN, SEVERITY, Verdict
from attnum.kernels import conventions
from attnum.numerics.formats import get_format, torch_dtype


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    """One row: a probe at one dtype."""

    name: str
    dtype: str
    status: str
    target_error: float
    baseline_error: float
    bound: float
    note: str
    seconds: float
    ratio: float = math.nan
    cases: tuple[Case, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return self.status not in FAILING

    @property
    def near_bound(self) -> bool:
        """A pass whose worst case used more than NEAR_BOUND of its bound."""
        return self.status == "pass" and self.ratio > NEAR_BOUND


@dataclass(frozen=True, kw_only=True)
class AuditReport:
    """Everything the table, --json and --html show."""

    target: str
    config: AuditConfig
    available: bool
    reason: str
    results: tuple[ProbeResult, ...]
    environment: dict = field(default_factory=dict)
    # The conventions judged by: {"causal_alignment", "empty_rows", "source": {field: where from}}.
    conventions: dict = field(default_factory=dict)
    isolated: bool = False
    # What the target's code warned that is not arithmetic (a DeprecationWarning from a library it imports):
    # "text (xN)", once each, kept out of the verdicts' notes (CaseLog).
    warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.available and all(r.passed for r in self.results)


NOTHING_TESTED = "nothing was tested"


def environment(device: str) -> dict:
    """What the verdicts may depend on: versions, threads, and the vectorised kernels torch's CPU
    ops dispatch to (``torch.backends.cpu.get_cpu_capability()``: DEFAULT, AVX2, AVX512, ...)."""
    import attnum

    env = {"attnum": getattr(attnum, "__version__", "unknown"), "torch": torch.__version__,
           "python": platform.python_version(), "platform": platform.platform(), "device": device,
           "torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["device_name"] = torch.cuda.get_device_name(torch.device(device))
    return env


def _nothing_tested(results: list[ProbeResult]) -> str:
    """The reason an audit whose every case was refused tested nothing ("" if something ran)."""
    if not results or any(r.status != "unsupported" for r in results):
        return ""
    n = sum(max(1, len(r.cases)) for r in results)
    first = next((c.verdict.note for r in results for c in r.cases if c.verdict.note), results[0].note)
    return f"{NOTHING_TESTED}: the target refused all {n} case(s) of {len(results)} probe row(s) (first: {first})"


def _worst(cases: list[Case]) -> Case:
    return max(cases, key=lambda c: (SEVERITY[c.verdict.status], c.verdict.ratio))


def _row(name: str, dtype: str, cases: list[Case], seconds: float) -> ProbeResult:
    if not cases:
        nan = math.nan
        return ProbeResult(name=name, dtype=dtype, status="unsupported", target_error=nan, baseline_error=nan,
                           bound=nan, note="no case applies to this dtype", seconds=seconds)
    w = _worst(cases)
    v = w.verdict
    note = f"{w.label}: {v.note}" if v.note else w.label
    n_bad = sum(1 for c in cases if c.verdict.status == v.status)
    if v.status != "pass" and n_bad > 1:
        note += f" (+{n_bad - 1} more {v.status})"
    n_refused = sum(1 for c in cases if c.verdict.status == "unsupported")
    if v.status != "unsupported" and n_refused:
        note += f"; {n_refused} case(s) unsupported"
    return ProbeResult(name=name, dtype=dtype, status=v.status, target_error=v.target_error,
                       baseline_error=v.baseline_error, bound=v.bound, note=note, seconds=seconds,
                       ratio=v.ratio if v.status not in NO_MARGIN else math.nan, cases=tuple(cases))


def aborted(status: str, note: str) -> Verdict:
    """The verdict of a probe whose target ended it: crashed / timed out / exited."""
    nan = math.nan
    return Verdict(status=status, target_error=nan, baseline_error=nan, bound=nan, note=note)


def resolve_conventions(config: AuditConfig, declared: dict[str, str]) -> dict:
    """The conventions to judge by: the config's (a CLI flag), else the target's declaration, else
    SDPA's; with where each came from."""
    out: dict = {"source": {}}
    for name, default in (("causal_alignment", conventions.DEFAULT_CAUSAL_ALIGNMENT),
                          ("empty_rows", conventions.DEFAULT_EMPTY_ROWS)):
        flag = getattr(config, name)
        if flag is not None:
            out[name], out["source"][name] = flag, "flag"
        elif name in declared:
            out[name], out["source"][name] = declared[name], "declared"
        else:
            out[name], out["source"][name] = default, "SDPA default"
    if config.emulation is not None:  # a flag: "none" turns a declared emulation off
        out["emulation"], out["source"]["emulation"] = config.emulation or None, "flag"
    elif declared.get("emulation"):
        out["emulation"], out["source"]["emulation"] = declared["emulation"], "declared"
    return out


def contexts(config: AuditConfig, target: Callable, conv: dict, monitor=None) -> dict[str, ProbeContext]:
    """One ProbeContext per dtype; ``arch``: the GPU model an interpreted Triton target runs under (its numerics
    label's ``nvidia-smXX``), None for a native one or Triton's raw interpreter."""
    import re

    model = re.search(r"nvidia-(sm\d+)", numerics_label(config, target))
    arch = model.group(1) if model else None
    if config.device == "cuda" and torch.cuda.is_available():  # a native run: the device's own tensor cores
        major, minor = torch.cuda.get_device_capability()
        arch = f"sm{major}{minor}"
    return {dtype: ProbeContext(target=target, dtype=torch_dtype(dtype), fmt=get_format(dtype), device=config.device,
                                k=config.k, k_grad=config.k_grad, floor_ulps=config.floor_ulps, strict=config.strict,
                                empty_rows=conv["empty_rows"], causal_alignment=conv["causal_alignment"],
                                seed=config.seed, emulation=conv.get("emulation"), monitor=monitor,
                                arch=arch)
            for dtype in config.dtypes}


# Warnings of the target's arithmetic (numpy's overflow / invalid value / divide by zero in an interpreted kernel):
# they explain a case, so they go into its note. Every other category (DeprecationWarning, FutureWarning,
# UserWarning, ...) comes from the code around the kernel and goes to the report's warnings, never a verdict.
ARITHMETIC_WARNINGS = ("RuntimeWarning: ",)


class CaseLog:
    """A monitor (see ProbeContext.monitor) that keeps the cases finished and the call in flight, so
    a probe cut short still shows what it had done and where it stopped. ``pending`` (the kernel
    server's ``take_warnings``) gives what the target warned since it was last asked: warnings of its
    arithmetic are kept per case (``warned``) and go into the case's note (:func:`with_warnings`); the
    others are kept for the whole audit (``library``: the report's warnings)."""

    def __init__(self, forward: Callable[[str, str, object], None] | None = None,
                 pending: Callable[[], list[str]] | None = None) -> None:
        self.forward, self.pending, self.cases, self.label, self.calls = forward, pending, [], "", 0
        self.warned: dict[str, list[str]] = {}
        self.library: list[str] = []

    def start(self) -> None:
        self.cases, self.label, self.calls, self.warned = [], "", 0, {}

    def collect(self, label: str) -> None:
        got = self.pending() if self.pending is not None else []
        arithmetic = [w for w in got if w.startswith(ARITHMETIC_WARNINGS)]
        self.library += [w for w in got if not w.startswith(ARITHMETIC_WARNINGS)]
        if arithmetic:
            self.warned.setdefault(label, []).extend(arithmetic)

    def __call__(self, event: str, label: str, payload: object = None) -> None:
        if event == "case":
            self.cases.append(payload)
            self.collect(getattr(payload, "label", label))
        elif event == "call":
            self.calls += 1
            self.label = label or f"call {self.calls}"
        if self.forward is not None:
            self.forward(event, label, payload)


def with_warnings(cases: list[Case], log: CaseLog) -> list[Case]:
    """``cases`` with each one's warnings (``log.warned``) appended to its note, counted once each:
    ``...; warned: RuntimeWarning: overflow encountered in multiply (x3)``. Warnings after the last
    case belong to it."""
    if cases:
        log.collect(cases[-1].label)
    out = []
    for case in cases:
        got = log.warned.get(case.label)
        if got:
            text = "; ".join(counted(got))
            v = case.verdict
            note = f"{v.note}; warned: {text}" if v.note else f"warned: {text}"
            case = dataclasses.replace(case, verdict=dataclasses.replace(v, note=note))
        out.append(case)
    return out


def run_probe(probe: Probe, ctx: ProbeContext, log: CaseLog) -> list[Case]:
    """The probe's cases; a target that raises outside a guarded call, or calls ``sys.exit``, ends
    the probe with one more case saying so (the cases it finished are kept)."""
    log.start()
    try:
        return probe.run(ctx)
    except SystemExit as exc:
        return [*log.cases, Case(label=log.label or "probe",
                                 verdict=aborted("exited", f"the target called sys.exit({exc.code!r})"))]
    except Exception as exc:  # noqa: BLE001 - a kernel raising outside a guarded call
        return [*log.cases, Case(label=log.label or "probe", verdict=raised(exc))]


def plan(config: AuditConfig) -> list[tuple[str, Probe]]:
    """(dtype, probe) in the order the audit runs them."""
    return [(dtype, probe) for dtype in config.dtypes for probe in select(config.probes)]


def numerics_label(config: AuditConfig, fn: Callable | None = None) -> str:
    """The arithmetic the verdicts ran under: a Triton target's interpreter model
    (``triton-interp:nvidia-sm90[,fp-fusion]`` / ``triton-interp:raw``), else ``native``."""
    declared = getattr(fn, "attnum_numerics", None)
    if declared:
        return str(declared)
    from attnum.kernels.registry import interpreted_triton
    from attnum.kernels.triton import interp as triton_interp

    if config.target and interpreted_triton(config.target, config.device):
        return triton_interp.label(config.numerics, config.arch)
    return "native"


def counted(warnings: list[str]) -> tuple[str, ...]:
    """Each distinct warning once, in order, with ``(xN)`` when it came N > 1 times."""
    counts: dict[str, int] = {}
    for w in warnings:
        counts[w] = counts.get(w, 0) + 1
    return tuple(w + (f" (x{n})" if n > 1 else "") for w, n in counts.items())


def finish(config: AuditConfig, available: bool, reason: str, results: list[ProbeResult], conv: dict,
           *, isolated: bool, fn: Callable | None = None, warnings: list[str] | None = None) -> AuditReport:
    # A target that refused every case was not audited: not "passed" (the CLI exits 3).
    refused = _nothing_tested(results)
    if refused:
        available, reason = False, refused
    env = {**environment(config.device), "numerics": numerics_label(config, fn)}
    if fn is not None:  # a merge-only target: causal alignment and empty rows do not apply (the report omits them)
        from attnum.kernels.serving import attention_conventions_apply

        conv = {**conv, "attention": attention_conventions_apply(fn)}
    name = config.target or getattr(fn, "__name__", repr(fn))
    return AuditReport(target=name, config=config, available=available, reason=reason,
                       results=tuple(results), environment=env, conventions=conv, isolated=isolated,
                       warnings=counted(warnings or []))
