"""``attnum spec-audit`` with the sampler in child processes, as ``attnum audit`` runs its targets.

The child (``python -m attnum.spec_audit.isolate``, see :mod:`attnum.isolation`) resolves the sampler
itself, so a ``sys.exit`` or a crash while it is imported is the child's death, and sends:

    ("ready", name)              the sampler resolved
    ("input_error", text)        the name does not resolve, or its output is malformed (exit 2)
    ("start", i)                 case i begins
    ("call", i) / ("returned", i)    the heartbeat around each call of the sampler
    ("row", i, row)              case i finished
    ("done",)

Every message restarts the parent's clock; ``timeout`` seconds of silence is a hang. When the child
dies or hangs, everything below it is killed, the case in flight fails with ``crashed`` (the signal),
``timed out`` or ``exited`` (the code, 0 included), and a fresh child goes on with the next case. A
death before "ready" is the sampler's import: one failing row, and the audit stops. The verdict is
``pass`` only when every case ran and passed.
"""

from __future__ import annotations

import os
import sys
import time

from attnum.errors import AttnumInputError
from attnum.isolation import Child, ChildGone, child_channel, death
from attnum.spec_audit.cases import get_cases
from attnum.spec_audit.engine import SpecAuditConfig, failed_row, generator, run_case, summary

IMPORT_GRACE = 60.0  # seconds added to the timeout for the child's own start (python, torch, attnum)
IMPORT_ROW = "sampler-import"


def _child() -> None:
    send, request = child_channel()
    import torch

    torch.set_num_threads(request["threads"])
    cfg: SpecAuditConfig = request["config"]
    from attnum.spec_audit.targets import resolve_sampler

    try:
        name, fn = resolve_sampler(cfg.target)
    except AttnumInputError as err:
        send("input_error", str(err))
        return
    send("ready", name)
    index = [request["start"]]

    def watched(*args, **kwargs):
        send("call", index[0])
        out = fn(*args, **kwargs)
        send("returned", index[0])
        return out

    cases = get_cases(cfg.cases)
    gen = generator(cfg, request["start"])
    for i, case in enumerate(cases):
        if i < request["start"]:
            continue
        index[0] = i
        send("start", i)
        try:
            row = run_case(case, watched, cfg, cfg.alpha / len(cases), gen)
        except AttnumInputError as err:
            send("input_error", str(err))
            return
        send("row", i, row)
    send("done")


def run_isolated(cfg: SpecAuditConfig, *, timeout: float = 300.0) -> dict:
    """The audit's document (:func:`attnum.spec_audit.runner.summary`), the sampler in child processes."""
    import torch

    cases = get_cases(cfg.cases)
    rows: list[dict] = []
    name, start, t0 = cfg.target, 0, time.perf_counter()
    while start < len(cases):
        child = Child("attnum.spec_audit.isolate", {"config": cfg, "start": start,
                                                    "threads": torch.get_num_threads()})
        ready, in_flight, in_call, outcome = False, None, False, "eof"
        try:
            for msg in child.frames(timeout + IMPORT_GRACE):
                kind = msg[0]
                if kind == "input_error":
                    raise AttnumInputError(msg[1])
                if kind == "ready":
                    ready, name = True, msg[1]
                    child.budget = timeout
                elif kind == "start":
                    in_flight, in_call = msg[1], False
                elif kind == "call":
                    in_call = True
                elif kind == "returned":
                    in_call = False
                elif kind == "row":
                    rows.append(msg[2])
                    start, in_flight = msg[1] + 1, None
                elif kind == "done":
                    outcome = "done"
                    break
        except TimeoutError:
            outcome = "timeout"
        except ChildGone:
            outcome = "eof"
        except BaseException:
            child.kill()
            raise
        if outcome == "done":
            child.kill()  # also whatever the sampler left running
            break
        if outcome == "timeout":
            child.kill()
            status, what = "timed out", f"no answer within {timeout:g} s"
        else:
            status, what = death(child.status())
            child.kill()
        if not ready:
            rows.append({"case": IMPORT_ROW, "verdict": "fail", "error": f"{status}: {what} while importing "
                         "the sampler", "why": "the sampler must import and resolve"})
            break
        i = start if in_flight is None else in_flight
        where = "in the sampler's call" if in_call else "between calls (attnum counting the case)"
        rows.append(failed_row(cases[i], f"{status}: {what}, {where}"))
        start = i + 1
    return summary(name, cfg, rows, time.perf_counter() - t0, len(cases))


if __name__ == "__main__":
    _child()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # atexit handlers and threads the sampler left behind must not hold the child
