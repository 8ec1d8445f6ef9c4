"""Run the probe catalogue against one target, per dtype, and collect one row per probe.

A probe's row is its worst case (fail > error > note > pass > unsupported; ties broken by how much
of the bound the error used), so the table shows the three numbers of the case that matters, its
margin (error / bound) and the case's label in the note. Every case is kept for --json. An audit in
which the target refused every case tested nothing: it is reported unavailable, never passed.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnum.audit.config import AuditConfig
from attnum.audit.harness import Case, ProbeContext, raised
from attnum.audit.probes import select
from attnum.audit.verdict import NEAR_BOUND, SEVERITY
from attnum.formats import get_format, torch_dtype


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
        return self.status not in ("fail", "error")

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
                       ratio=v.ratio if v.status not in ("error", "unsupported") else math.nan, cases=tuple(cases))


def run_audit(config: AuditConfig, target: Callable[..., torch.Tensor] | None = None,
              progress: Callable[[ProbeResult], None] | None = None) -> AuditReport:
    """Audit ``target`` (or the one ``config.target`` names) with the configured probes and dtypes."""
    available, reason = True, ""
    if target is None:
        from attnum.kernels.registry import resolve

        resolved = resolve(config.target, config.device, param="target")
        target, available, reason = resolved.fn, resolved.available, resolved.reason
    results: list[ProbeResult] = []
    if available:
        for dtype in config.dtypes:
            ctx = ProbeContext(target=target, dtype=torch_dtype(dtype), fmt=get_format(dtype), device=config.device,
                               k=config.k, k_grad=config.k_grad, floor_ulps=config.floor_ulps,
                               strict=config.strict, empty_rows=config.empty_rows, seed=config.seed)
            for probe in select(config.probes):
                t0 = time.perf_counter()
                try:
                    cases = probe.run(ctx)
                except Exception as exc:  # noqa: BLE001 - a kernel raising outside a guarded call
                    cases = [Case(label="probe", verdict=raised(exc))]
                row = _row(probe.name, dtype, cases, time.perf_counter() - t0)
                results.append(row)
                if progress is not None:
                    progress(row)
    # A target that refused every case was not audited: not "passed" (the CLI exits 3).
    refused = _nothing_tested(results)
    if refused:
        available, reason = False, refused
    return AuditReport(target=config.target, config=config, available=available, reason=reason,
                       results=tuple(results), environment=environment(config.device))
