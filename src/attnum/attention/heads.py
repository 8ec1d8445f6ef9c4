"""Parallelism across heads for the CPU flash forward: each of T threads runs whole heads on one intra-op thread.

Shape alphabet: B batch, H heads, N queries, S keys, d head dim, dv value dim, h a block of heads.

torch's intra-op threads split every op of a tile step; on a small tile (N=512: 32k-element exps) each
split waits for the other thread, which on a busy machine costs more than the op. Heads are
independent, so :func:`run` cuts them into T blocks (T = torch's thread count) and runs the forward of
each block on its own Python thread with one intra-op thread (torch ops and the compiled kernels
release the GIL). Each head's arithmetic is unchanged: the same per-head matmuls and element-wise ops;
the softmax scale is moved into Q (``steps.prescale``) once for all heads, as the one-thread run does.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from attnum.attention import steps

_LOCAL = threading.local()
_POOL: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def in_worker() -> bool:
    return getattr(_LOCAL, "worker", False)


def threads_for(H: int, device) -> int:
    """Worker threads for H heads: torch's intra-op thread count, at most H; 1 off the CPU or inside a worker."""
    if torch.device(device).type != "cpu" or in_worker():
        return 1
    return max(1, min(torch.get_num_threads(), H))


class HeadSlice:
    """A call's masking seen by heads [h0, h1) of H: each tile's parts cut on their head dimension."""

    def __init__(self, mk, h0: int, h1: int, H: int):
        self.mk, self.h0, self.h1, self.H = mk, h0, h1, H

    def tile(self, i0: int, i1: int, j0: int, j1: int, dtype, device):
        t = self.mk.tile(i0, i1, j0, j1, dtype, device)
        return type(t)(additive=self._cut(t.additive), keep=self._cut(t.keep))

    def _cut(self, x):
        if x is None or x.dim() < 3 or x.shape[-3] != self.H or self.H == 1:
            return x
        return x[..., self.h0:self.h1, :, :]


def _pool(T: int) -> ThreadPoolExecutor:
    with _LOCK:
        if T not in _POOL:
            _POOL[T] = ThreadPoolExecutor(max_workers=T, thread_name_prefix="attnum-heads",
                                          initializer=lambda: setattr(_LOCAL, "worker", True))
        return _POOL[T]


def run(forward, q_BHNd, k_BHSd, v_BHSd, mk, *, scale: float, policy, T: int, **kw):
    """``forward`` (flash_forward's signature) over T blocks of heads in parallel; (O, lse) as one call gives."""
    H = q_BHNd.shape[1]
    q_BHNd, scale = steps.prescale(q_BHNd, scale, policy)
    bounds = [(H * t // T, H * (t + 1) // T) for t in range(T)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        futures = [_pool(T).submit(forward, q_BHNd[:, h0:h1], k_BHSd[:, h0:h1], v_BHSd[:, h0:h1],
                                   HeadSlice(mk, h0, h1, H), scale=scale, policy=policy, **kw) for h0, h1 in bounds]
        parts = [f.result() for f in futures]
    finally:
        torch.set_num_threads(threads)
    return torch.cat([o for o, _ in parts], dim=1), torch.cat([lse for _, lse in parts], dim=1)
