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


def _worker(rank, world_size, port, backend, timeout_s, fn, args, fault, out):
    import torch
    import torch.distributed as dist

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
    procs = [ctx.Process(target=_worker, args=(r, world_size, port, backend, timeout, fn, args, fault, out),
                         daemon=True) for r in range(world_size)]
    try:
        for p in procs:
            p.start()
    finally:
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp
    results: dict[int, object] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world_size:
            try:
                msg = out.get(timeout=0.2)
            except queue.Empty:
                msg = None
            if msg is not None:
                if msg[1] == "error":
                    raise RankFailed(f"rank {msg[0]} of {world_size} failed: {msg[2]}")
                results[msg[0]] = _load(msg[2])
                continue
            for r, p in enumerate(procs):
                if r not in results and p.exitcode is not None:
                    _drain(out, results)
                    if r not in results:
                        raise RankFailed(f"rank {r} of {world_size} died with exit code {p.exitcode} before reporting")
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


def _drain(out, results: dict) -> None:
    """Results a rank put on the queue just before exiting (its message may arrive after its exit)."""
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        try:
            msg = out.get(timeout=0.1)
        except queue.Empty:
            continue
        if msg[1] == "error":
            raise RankFailed(f"rank {msg[0]} failed: {msg[2]}")
        results[msg[0]] = _load(msg[2])


def _load(data: bytes):
    import torch

    return torch.load(io.BytesIO(data), weights_only=False)
