"""Run the audited target in a child process, so that nothing it does ends the audit.

The parent (:func:`run_isolated`) starts ``python -m attnum.audit.isolate`` in its own process group
and sends it the config and the index of the first (dtype, probe) to run. The child imports and
resolves the target itself (a ``sys.exit`` or a crash at import is the child's death, not the
parent's), points its stdout at stderr (so ``--json`` stays clean) and sends back, over its
original stdout, length-prefixed pickles:

    ("ready", info)          the target resolved: availability, declared conventions
    ("input_error", text)    the name does not resolve (the CLI exits 2 with that line)
    ("start", i)             probe i of the plan begins
    ("call" | "returned", i, label)   the heartbeat around each call of the target
    ("case", i, Case)        a case finished
    ("row", i, ProbeResult)  probe i finished
    ("done",)

Every message restarts the parent's clock; ``config.timeout`` seconds of silence is a hang. When the
child dies or hangs, its process group is killed, the probe in flight gets a row ``crashed`` (the
signal), ``timed out`` (after how long, at which case) or ``exited`` (the exit code, 0 included) with
the cases it had finished, and a fresh child continues with the next probe. A death before "ready"
is the target's import: one row, and the audit stops there.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from attnum.audit import engine as runner  # not attnum.audit.runner: that module imports this one
from attnum.audit.config import AuditConfig
from attnum.audit.harness import Case
from attnum.errors import AttnumInputError
from attnum.isolation import Child, ChildGone, child_channel, death

IMPORT_GRACE = 60.0  # seconds added to the timeout for the child's own start (python, torch, attnum)
IMPORT_ROW = "target-import"  # the row of a target that dies while it is being imported


# -- the child -------------------------------------------------------------------------------------

def _child() -> None:
    send, request = child_channel()  # stdout to stderr, subreaper, faulthandler, the parent's sys.path
    import torch

    torch.set_num_threads(request["threads"])
    config: AuditConfig = request["config"]
    from attnum.kernels.registry import resolve

    try:
        target = resolve(config.target, config.device, param="target", numerics=config.numerics)
    except AttnumInputError as err:
        send("input_error", str(err))
        return
    conv = runner.resolve_conventions(config, target.declared)
    send("ready", {"available": target.available, "reason": target.reason, "conventions": conv})
    if not target.available:
        return
    index = [request["start"]]
    log = runner.CaseLog(forward=lambda event, label, payload: send(event, index[0], label, payload))
    ctxs = runner.contexts(config, target.fn, conv, monitor=log)
    for i, (dtype, probe) in enumerate(runner.plan(config)):
        if i < request["start"]:
            continue
        index[0] = i
        send("start", i)
        t0 = time.perf_counter()
        row = runner._row(probe.name, dtype, runner.run_probe(probe, ctxs[dtype], log), time.perf_counter() - t0)
        send("row", i, row)
    send("done")


# -- the parent ------------------------------------------------------------------------------------

class _Child(Child):
    """One child process and the frames it sends (attnum.isolation: killed whole, setsid included)."""

    def __init__(self, config: AuditConfig, start: int) -> None:
        super().__init__("attnum.audit.isolate", {"config": config, "start": start, "threads": _threads()})


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def run_isolated(config: AuditConfig, progress: Callable[[runner.ProbeResult], None] | None = None
                 ) -> runner.AuditReport:
    """:func:`attnum.audit.runner.run_audit` with the target in child processes (see the module doc)."""
    from attnum.kernels import user
    from attnum.kernels.registry import resolve

    if not user.is_user_spec(config.target.strip()):
        # attnum's own names resolve here without running anything: an unknown or unavailable one
        # needs no child.
        t = resolve(config.target, config.device, param="target")
        if not t.available:
            conv = runner.resolve_conventions(config, t.declared)
            return runner.finish(config, False, t.reason, [], conv, isolated=True)
    todo = runner.plan(config)
    results: list[runner.ProbeResult] = []
    conv: dict = runner.resolve_conventions(config, {})

    def add(row: runner.ProbeResult) -> None:
        results.append(row)
        if progress is not None:
            progress(row)

    start = 0
    while start < len(todo):
        child = _Child(config, start)
        ready, in_flight, cases, label, t_probe, outcome = False, None, [], "", time.perf_counter(), "eof"
        in_call = False
        try:
            for msg in child.frames(config.timeout + IMPORT_GRACE):
                kind = msg[0]
                if kind == "input_error":
                    raise AttnumInputError(msg[1])
                if kind == "ready":
                    ready, conv = True, msg[1]["conventions"]
                    if not msg[1]["available"]:
                        outcome = "unavailable"
                        break
                    child_timeout = config.timeout
                elif kind == "start":
                    in_flight, cases, label, t_probe, in_call = msg[1], [], "", time.perf_counter(), False
                elif kind == "call":
                    label, in_call = msg[2] or f"call in {todo[msg[1]][1].name}", True
                elif kind == "returned":
                    in_call = False
                elif kind == "case":
                    cases.append(msg[3])
                    in_call = False
                elif kind == "row":
                    add(msg[2])
                    start, in_flight = msg[1] + 1, None
                elif kind == "done":
                    outcome = "done"
                    break
                if ready:
                    child.budget = child_timeout
        except TimeoutError:
            outcome = "timeout"
        except ChildGone:
            outcome = "eof"  # garbage on the channel: the child is treated as dead
        except BaseException:
            child.kill()
            raise
        if outcome == "unavailable":
            child.kill()
            return runner.finish(config, False, msg[1]["reason"], results, conv, isolated=True)
        if outcome == "done":
            child.kill()  # also whatever the target left running in its group
            break
        if outcome == "timeout":
            child.kill()
            status, what = "timed out", f"no answer within {config.timeout:g} s"
        else:
            status, what = death(child.status())
            child.kill()
        if not ready:
            add(runner._row(IMPORT_ROW, ",".join(config.dtypes),
                            [Case(label="import", verdict=runner.aborted(status, f"{what} while importing the target"))],
                            time.perf_counter() - t_probe))
            break
        i = start if in_flight is None else in_flight
        dtype, probe = todo[i]
        if not label:
            where = "before any call of the target through ctx.call in this probe"
        else:
            where = "in the target's call" if in_call else "after the target returned (attnum judging the case)"
        cases.append(Case(label=label or "probe", verdict=runner.aborted(status, f"{what}, {where}")))
        add(runner._row(probe.name, dtype, cases, time.perf_counter() - t_probe))
        start = i + 1
    return runner.finish(config, True, "", results, conv, isolated=True)


if __name__ == "__main__":
    _child()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # atexit handlers and threads the target left behind must not hold the child
