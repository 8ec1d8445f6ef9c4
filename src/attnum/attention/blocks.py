"""Parallelism across query-row blocks for the CPU flash forward: T threads, one intra-op thread each.

Shape alphabet: B batch, H heads, N queries, n rows of one block, Bc keys per tile.

torch's intra-op threads split every op of a tile step; on a small tile (N=512: 32k-element exps) each
split waits for the other thread, which on a busy machine costs more than the op. Query rows are
independent in the forward, so the forward cuts them into blocks whose size is a function of the shape
alone (:func:`attnum.attention.flash_forward.row_block`) and :func:`map_blocks` runs the blocks on T
Python threads (T = torch's intra-op thread count), each op on one intra-op thread (torch ops and the
compiled kernels release the GIL). The blocks, hence the BLAS calls and every bit, are the same
whatever T is.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from attnum.attention.steps import caller_threads

_LOCAL = threading.local()
_POOL: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def in_worker() -> bool:
    return getattr(_LOCAL, "worker", False)


def threads_for(n_blocks: int, device) -> int:
    """Threads for ``n_blocks`` blocks: torch's intra-op thread count, at most n_blocks; 1 off the CPU or in a worker."""
    if torch.device(device).type != "cpu" or in_worker():
        return 1
    return max(1, min(caller_threads(), n_blocks))


def _pool(T: int) -> ThreadPoolExecutor:
    with _LOCK:
        if T not in _POOL:
            _POOL[T] = ThreadPoolExecutor(max_workers=T, thread_name_prefix="attnum-rows",
                                          initializer=lambda: setattr(_LOCAL, "worker", True))
        return _POOL[T]


def map_blocks(fn, bounds: list[tuple[int, int]], T: int) -> list:
    """[fn(i0, i1) for each block], on T threads with one intra-op thread each when T > 1."""
    if T <= 1:
        return [fn(i0, i1) for i0, i1 in bounds]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (a caller inside steps.elementwise_single_thread is at 1 already)
    try:
        futures = [_pool(T).submit(fn, i0, i1) for i0, i1 in bounds]
        return [f.result() for f in futures]
    finally:
        torch.set_num_threads(threads)
