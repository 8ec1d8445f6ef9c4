"""``run_spec_audit``: the spec audit in this process or, isolated, in child processes
(:mod:`attnum.spec_audit.isolate`); the per-case engine is :mod:`attnum.spec_audit.engine`."""

from __future__ import annotations

import time

from attnum.spec_audit.cases import get_cases
from attnum.spec_audit.engine import SpecAuditConfig, generator, run_case, summary
from attnum.spec_audit.targets import resolve_sampler

__all__ = ["SpecAuditConfig", "run_spec_audit"]


def run_spec_audit(cfg: SpecAuditConfig, sampler=None, *, isolate: bool = False, timeout: float = 300.0) -> dict:
    """Audit ``cfg.target`` (or the callable ``sampler``): one row per case and the overall verdict.

    ``isolate``: run a named target in child processes (attnum.spec_audit.isolate; the CLI does), so
    a crash, a hang past ``timeout`` s of silence or an exit fails the case in flight, not the audit."""
    if isolate and sampler is None:
        from attnum.spec_audit.isolate import run_isolated

        return run_isolated(cfg, timeout=timeout)
    name, fn = resolve_sampler(sampler if sampler is not None else cfg.target)
    cases = get_cases(cfg.cases)
    alpha_case = cfg.alpha / len(cases)
    gen = generator(cfg)
    t0 = time.perf_counter()
    rows = [run_case(case, fn, cfg, alpha_case, gen) for case in cases]
    return summary(name, cfg, rows, time.perf_counter() - t0, len(cases))
