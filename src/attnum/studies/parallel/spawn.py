"""Run a function on P processes joined in a torch.distributed group, and never hang doing it.

``run_ranks(fn, world_size, args=..., backend="gloo")`` spawns one process per rank (torch.multiprocessing,
``spawn`` start method), initialises the process group over TCP on a free local port with ``timeout``
on every collective, calls ``fn(rank, world_size, *args)`` and returns the ranks' results in rank order.
If a rank raises, the error comes back with its rank; if a rank dies without a word (killed,
``os._exit``), the parent notices its exit code; either way every other rank is terminated and
:class:`RankFailed` names the rank and the error. The whole run has a deadline as well.
"""

from __future__ import annotations

import io
import os
import queue
import socket
import time
import traceback
from datetime import timedelta

import torch.multiprocessing as mp

from attnum.errors import bad_value

BACKENDS = ("gloo", "nccl")


class RankFailed(RuntimeError):
    """A rank of a distributed run raised, died or timed out; the message names it."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, backend, timeout_s, fn, args, fault, out, parent_pid):
    import torch
    import torch.distributed as dist

    from attnum.sandbox.processes import die_with_parent

    die_with_parent(parent_pid)  # a SIGKILLed parent must not leave ranks waiting in a collective
    try:
        torch.set_num_threads(1)
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
        if fault and fault.get("rank") == rank:
            if fault.get("kind") == "exit":
                os._exit(3)  # dies without a word: the parent must notice
            raise RuntimeError(fault.get("message", "injected fault"))
        result = fn(rank, world_size, *args)
        buf = io.BytesIO()
        torch.save(result, buf)  # bytes, not shared tensors: the parent may read after this rank exits
        out.put((rank, "ok", buf.getvalue()))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent, with the rank
        out.put((rank, "error", f"{type(exc).__name__}: {exc}".splitlines()[0], traceback.format_exc()))


def run_ranks(fn, world_size: int, *, args: tuple = (), backend: str = "gloo", timeout: float = 120.0,
              fault: dict | None = None) -> list:
    """fn(rank, world_size, *args) on ``world_size`` processes -> results in rank order.

    ``fn`` and ``args`` must be picklable (a module-level function). ``timeout``: seconds, for each
    collective and for the whole run. ``fault``: for tests, ``{"rank": r, "kind": "raise" | "exit"}``.
    """
    if backend not in BACKENDS:
        raise bad_value("backend", backend, f"one of {BACKENDS}")
    if not isinstance(world_size, int) or world_size < 1:
        raise bad_value("world_size", world_size, "a positive integer")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    omp = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # children inherit it: one thread per rank
    procs = [ctx.Process(target=_worker, args=(r, world_size, port, backend, timeout, fn, args, fault, out,
                                               os.getpid()), daemon=True) for r in range(world_size)]
    try:
        for p in procs:
            p.start()
    finally:
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp
    results: dict[int, object] = {}
    errors: list[str] = []  # in the order they arrived
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world_size:
            _poll(out, results, errors, 0.2, world_size)
            silent = [r for r, p in enumerate(procs) if r not in results and p.exitcode not in (None, 0)]
            if errors or silent:
                # A failure cascades (the others see a reset connection): collect for a moment, then
                # name the cause first -- a rank that died without a word, else the first error.
                # Wait until every rank has ended (or 10 s): a loaded machine can take seconds to
                # finish a dying process, and its exit code is what names the cause.
                end = time.monotonic() + 10.0
                while time.monotonic() < end:
                    _poll(out, results, errors, 0.1, world_size)
                    if not any(p.is_alive() for p in procs):
                        _poll(out, results, errors, 0.1, world_size)
                        break
                silent = [r for r, p in enumerate(procs)
                          if r not in results and p.exitcode not in (None, 0) and not any(
                              e.startswith(f"rank {r} ") for e in errors)]
                causes = [f"rank {r} of {world_size} died with exit code {procs[r].exitcode} before reporting"
                          for r in silent] + errors
                more = f" (and {len(causes) - 1} more: {'; '.join(causes[1:])})" if len(causes) > 1 else ""
                raise RankFailed(causes[0] + more)
            if time.monotonic() > deadline:
                missing = sorted(set(range(world_size)) - set(results))
                raise RankFailed(f"ranks {missing} of {world_size} gave no result within {timeout:.0f} s")
        return [results[r] for r in range(world_size)]
    finally:
        for p in procs:
            p.join(timeout=5 if len(results) == world_size else 0.5)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join()


def _poll(out, results: dict, errors: list, timeout: float, world_size: int) -> None:
    """Take every message waiting on the queue (waiting up to ``timeout`` for the first)."""
    wait = timeout
    while True:
        try:
            msg = out.get(timeout=wait) if wait else out.get_nowait()
        except queue.Empty:
            return
        wait = 0
        if msg[1] == "error":
            errors.append(f"rank {msg[0]} of {world_size} failed: {msg[2]}")
        else:
            results[msg[0]] = _load(msg[2])


def _load(data: bytes):
    import torch

    return torch.load(io.BytesIO(data), weights_only=False)
