"""``attnum spec-audit`` with the sampler in a kernel server, as ``attnum audit`` runs its targets.

The cases, the draws of the draft tokens, the counts, the test and the verdict run here, in the
parent. The sampler runs in a child process (:mod:`attnum.sandbox.server`) that resolves it (a
``sys.exit`` or a crash while it is imported is the child's death) and only computes it: each call
sends p, q, the drafts and the generator's state as raw bytes and gets the tokens (and the
generator's new state) back as data, which :func:`attnum.spec_audit.engine.run_case` checks like any
output. What the sampler writes to the channel or patches in its own process is at most a wrong
output for one call; no frame it sends is a row or a verdict.

Each call has ``timeout`` seconds. When the child dies, hangs or breaks the protocol, its whole tree
is killed, the case in flight fails with ``crashed`` (the signal, or the malformed reply), ``timed
out`` or ``exited`` (the code, 0 included), and a fresh child goes on with the next case. A death
before the sampler resolved is its import: one failing row, and the audit stops. The verdict is
``pass`` only when every case ran and passed.
"""

from __future__ import annotations

import time

import torch

from attnum.sandbox.remote import RemoteTarget
from attnum.sandbox.server import KernelServer, TargetGone
from attnum.spec_audit.cases import get_cases
from attnum.spec_audit.engine import SpecAuditConfig, failed_row, generator, run_case, summary

IMPORT_ROW = "sampler-import"


def run_isolated(cfg: SpecAuditConfig, *, timeout: float = 300.0) -> dict:
    """The audit's document (:func:`attnum.spec_audit.runner.summary`), the sampler in kernel servers."""
    cases = get_cases(cfg.cases)
    rows: list[dict] = []
    name, t0 = cfg.target, time.perf_counter()
    server: KernelServer | None = None
    i = 0
    try:
        while i < len(cases):
            if server is None:
                server = KernelServer("sampler", cfg.target, timeout=timeout, threads=torch.get_num_threads(),
                                      resolver="attnum.spec_audit.targets:resolve_sampler")
                try:
                    info = server.start()  # AttnumInputError: the name does not resolve (exit 2)
                except TargetGone as gone:
                    rows.append({"case": IMPORT_ROW, "verdict": "fail", "error": f"{gone.status}: {gone.what} "
                                 "while importing the sampler", "why": "the sampler must import and resolve"})
                    break
                name = str(info.get("name", name))
                sampler = RemoteTarget(server)
                gen = generator(cfg, i)  # a fresh child from case i on: its own stream, fixed by the seed
            try:
                row = run_case(cases[i], sampler, cfg, cfg.alpha / len(cases), gen)
            except TargetGone as gone:
                server = None  # killed whole; the next case gets a fresh one
                row = failed_row(cases[i], f"{gone.status}: {gone.what}")
            rows.append(row)
            i += 1
    finally:
        if server is not None:
            server.close()  # also whatever the sampler left running
    return summary(name, cfg, rows, time.perf_counter() - t0, len(cases))
