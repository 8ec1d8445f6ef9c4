"""Run the probe catalogue against one target, per dtype, and collect one row per probe.

A target named by a string runs in a kernel server (attnum.audit.isolate): a crash, a hang past
``config.timeout`` or an exit ends only the probe in flight, whose row then says ``crashed``,
``timed out`` or ``exited``. A callable passed as ``target`` runs in this process (it may not be
importable by a child); ``isolate=False`` forces that for names too (debugging).

The rows, the report and the in-process engine live in :mod:`attnum.audit.engine`; their names are
importable from here as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from attnum.audit import isolate as iso
from attnum.audit.config import AuditConfig
from attnum.audit.engine import (  # noqa: F401 - the public names of attnum.audit.runner
    NOTHING_TESTED,
    AuditReport,
    CaseLog,
    ProbeResult,
    _row,
    aborted,
    contexts,
    environment,
    finish,
    numerics_label,
    plan,
    resolve_conventions,
    run_probe,
)
from attnum.kernels import conventions


def run_audit(config: AuditConfig, target: Callable[..., torch.Tensor] | None = None,
              progress: Callable[[ProbeResult], None] | None = None, *, isolate: bool | None = None,
              started: object = None) -> AuditReport:
    """Audit ``target`` (or the one ``config.target`` names) with the configured probes and dtypes.

    ``isolate``: None = ``config.isolate`` for a name, in-process for a callable. ``started``: what
    :func:`attnum.audit.isolate.start` returned for ``config``, when the caller resolved the target
    before its progress began (the CLI: a bad target is then its first and only line); in process, the
    :class:`attnum.kernels.registry.Target` that ``config.target`` resolved to.
    """
    if isolate is None:
        isolate = config.isolate and target is None
    if target is None and config.target is None:
        from attnum.errors import bad_value

        raise bad_value("target", None, "a name in AuditConfig.target or a callable passed to run_audit")
    if isolate:
        if target is not None:
            raise ValueError("isolate=True needs the target by name (config.target), not a callable")
        return iso.run_isolated(config, progress=progress, started=started)
    available, reason, declared = True, "", {}
    if target is None:
        from attnum.kernels.registry import Target, resolve

        resolved = started if isinstance(started, Target) else resolve(
            config.target, config.device, param="target", numerics=config.numerics, arch=config.arch)
        target, available, reason, declared = resolved.fn, resolved.available, resolved.reason, resolved.declared
    else:
        declared = conventions.declared(target)
    conv = resolve_conventions(config, declared)
    results: list[ProbeResult] = []
    if available:
        log = CaseLog()
        ctxs = contexts(config, target, conv, monitor=log)
        for dtype, probe in plan(config):
            t0 = time.perf_counter()
            row = _row(probe.name, dtype, run_probe(probe, ctxs[dtype], log), time.perf_counter() - t0)
            results.append(row)
            if progress is not None:
                progress(row)
    return finish(config, available, reason, results, conv, isolated=False, fn=target)


