"""Run the probe catalogue against one target, per dtype, and collect one row per probe.

A probe's row is its worst case (fail > error > note > pass > unsupported; ties broken by how much
of the bound the error used), so the table shows the three numbers of the case that matters and
the case's label in the note. Every case is kept for --json.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnum.audit.config import AuditConfig
from attnum.audit.harness import Case, ProbeContext, raised
from attnum.audit.probes import select
from attnum.audit.verdict import SEVERITY
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
    cases: tuple[Case, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return self.status not in ("fail", "error")


@dataclass(frozen=True, kw_only=True)
class AuditReport:
    """Everything the table, --json and --html show."""

    target: str
    config: AuditConfig
    available: bool
    reason: str
    results: tuple[ProbeResult, ...]

    @property
    def passed(self) -> bool:
        return self.available and all(r.passed for r in self.results)


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
                       cases=tuple(cases))


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
    return AuditReport(target=config.target, config=config, available=available, reason=reason,
                       results=tuple(results))
