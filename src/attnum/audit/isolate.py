"""Run the audited target in a kernel server, so that nothing it does ends the audit or forges a verdict.

The probes, the references and the verdicts run here, in the parent. The target runs in a child
process (:mod:`attnum.sandbox.server`) that resolves it (a ``sys.exit`` or a crash at import is the
child's death, not the parent's) and only computes it: each call of ``ctx.target`` (and each backward
of its output) is one request with the inputs as raw tensor bytes, answered with the outputs as data
that the parent checks like any output (:mod:`attnum.sandbox.remote`). What the target writes to the
channel or patches in its own process is at most a wrong output for one call; no frame the child
sends is a case, a row or a verdict.

Each call has ``config.timeout`` seconds. When the child dies, hangs or breaks the protocol, its
whole tree is killed, the probe in flight gets a row ``crashed`` (the signal, or the malformed
reply), ``timed out`` (after how long, at which case) or ``exited`` (the exit code, 0 included) with
the cases it had finished, and a fresh child serves the next probe. A death before the target
resolved is its import: one row, and the audit stops there.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from attnum.audit import engine as runner  # not attnum.audit.runner: that module imports this one
from attnum.audit.config import AuditConfig
from attnum.audit.harness import Case
from attnum.kernels import conventions
from attnum.sandbox.remote import RemoteTarget
from attnum.sandbox.server import IMPORT_GRACE, KernelServer, TargetGone

__all__ = ["IMPORT_GRACE", "IMPORT_ROW", "Started", "run_isolated", "start"]
IMPORT_ROW = "target-import"  # the row of a target that dies while it is being imported


def _declared(info: dict) -> dict[str, str]:
    """The conventions the child says the target declares, checked as the in-process path checks them."""
    raw = info.get("declared")
    out = {}
    for field, norm in (("causal_alignment", conventions.causal_alignment), ("empty_rows", conventions.empty_rows)):
        if isinstance(raw, dict) and raw.get(field) is not None:
            out[field] = norm(str(raw[field]), param=f"target.attnum_{field}")
    if isinstance(raw, dict) and raw.get("emulation") is not None:  # a policy (attnum.audit.emulated)
        emulation = conventions.check_emulation(str(raw["emulation"]), param="target.attnum_emulation")
        if emulation:
            out["emulation"] = emulation
    return out


class Started:
    """A kernel server whose target resolved and can run here: what :func:`start` hands :func:`run_isolated`."""

    def __init__(self, server: KernelServer, info: dict) -> None:
        self.server, self.info = server, info


def _server(config: AuditConfig) -> KernelServer:
    return KernelServer("attention", config.target, device=config.device, timeout=config.timeout,
                        threads=torch.get_num_threads(), numerics=config.numerics, arch=config.arch)


def start(config: AuditConfig) -> Started | runner.AuditReport:
    """Resolve ``config.target`` before any probe runs: attnum's own names here, a user's code in a fresh
    kernel server (it imports the file or module and checks the signature there). An unknown name or a bad
    target is an AttnumInputError now, before the audit's progress starts; a target that cannot run here,
    or dies while it is imported, is the finished report that says so."""
    from attnum.kernels import user
    from attnum.kernels.registry import resolve

    if not user.is_user_spec(config.target.strip()):
        # attnum's own names resolve here without running anything: an unknown or unavailable one
        # needs no child.
        t = resolve(config.target, config.device, param="target", runs_here=False)
        if not t.available:
            conv = runner.resolve_conventions(config, t.declared)
            return runner.finish(config, False, t.reason, [], conv, isolated=True)
    t0 = time.perf_counter()
    server = _server(config)
    try:
        info = server.start()  # AttnumInputError: the name does not resolve (exit 2)
    except TargetGone as gone:
        server.close()
        verdict = runner.aborted(gone.status, f"{gone.what} while importing the target")
        row = runner._row(IMPORT_ROW, ",".join(config.dtypes), [Case(label="import", verdict=verdict)],
                          time.perf_counter() - t0)
        return runner.finish(config, True, "", [row], runner.resolve_conventions(config, {}), isolated=True)
    except BaseException:
        server.close()
        raise
    conv = runner.resolve_conventions(config, _declared(info))
    if info.get("available") is not True:
        server.close()
        return runner.finish(config, False, str(info.get("reason", "")), [], conv, isolated=True)
    return Started(server, info)


def run_isolated(config: AuditConfig, progress: Callable[[runner.ProbeResult], None] | None = None,
                 started: Started | runner.AuditReport | None = None) -> runner.AuditReport:
    """:func:`attnum.audit.runner.run_audit` with the target in kernel servers (see the module doc);
    ``started``: what :func:`start` returned, when the caller resolved the target first."""
    first = start(config) if started is None else started
    if isinstance(first, runner.AuditReport):
        return first
    todo = runner.plan(config)
    results: list[runner.ProbeResult] = []
    conv: dict = runner.resolve_conventions(config, _declared(first.info))

    def add(row: runner.ProbeResult) -> None:
        results.append(row)
        if progress is not None:
            progress(row)

    server: KernelServer | None = first.server
    target = RemoteTarget(server)
    library: list[str] = []  # every log's non-arithmetic warnings (the report's, not a verdict's)
    log = runner.CaseLog(pending=server.take_warnings)
    ctxs = runner.contexts(config, target, conv, monitor=log)
    i = 0
    try:
        while i < len(todo):
            t_probe = time.perf_counter()
            if server is None:  # the last probe's child died: a fresh one for this probe
                server = _server(config)
                try:
                    info = server.start()
                except TargetGone as gone:
                    verdict = runner.aborted(gone.status, f"{gone.what} while importing the target")
                    add(runner._row(IMPORT_ROW, ",".join(config.dtypes), [Case(label="import", verdict=verdict)],
                                    time.perf_counter() - t_probe))
                    break
                conv = runner.resolve_conventions(config, _declared(info))
                if info.get("available") is not True:
                    return runner.finish(config, False, str(info.get("reason", "")), results, conv, isolated=True)
                target = RemoteTarget(server)
                library += log.library
                log = runner.CaseLog(pending=server.take_warnings)
                ctxs = runner.contexts(config, target, conv, monitor=log)
            dtype, probe = todo[i]
            try:
                cases = runner.run_probe(probe, ctxs[dtype], log)
            except TargetGone as gone:
                server = None  # killed whole by KernelServer; the next probe gets a fresh one
                cases = [*log.cases, Case(label=log.label or "probe", verdict=runner.aborted(gone.status, gone.what))]
            cases = runner.with_warnings(cases, log)
            add(runner._row(probe.name, dtype, cases, time.perf_counter() - t_probe))
            i += 1
    finally:
        if server is not None:
            server.close()  # also whatever the target left running in its tree
    return runner.finish(config, True, "", results, conv, isolated=True, fn=target, warnings=library + log.library)
