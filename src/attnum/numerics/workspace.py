"""Scratch tensors reused across a loop.

On CPU a fresh multi-megabyte tensor is mapped from the OS and page-faulted on first touch every
time (tens of milliseconds per 64 MB), which can cost more than the arithmetic done in it; hot loops
(the flash tile loop, golden's query chunks, in-place rounding) take their buffers from here.
"""

from __future__ import annotations

import threading

import torch

KEEP_BYTES = 1 << 29  # a thread's kept workspace is dropped when it would hold more than this (512 MiB)


class Workspace:
    """Named buffers, one per (name, shape, dtype, device), allocated on first use."""

    def __init__(self) -> None:
        self._bufs: dict[tuple, torch.Tensor] = {}

    def get(self, name: str, shape, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        key = (name, tuple(shape), dtype, torch.device(device))
        buf = self._bufs.get(key)
        if buf is None:
            buf = self._bufs[key] = torch.empty(tuple(shape), dtype=dtype, device=device)
        return buf

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self._bufs.values())


_KEPT = threading.local()


def kept() -> Workspace:
    """This thread's workspace, kept across calls: a buffer larger than the C allocator's mmap
    threshold (32 MiB at most in glibc) is otherwise returned to the OS when freed and page-faulted
    afresh by the next call (measured: ~8 ms per 8 MiB tile on a 2-core VM). Emptied when it grows
    past ``KEEP_BYTES``. Callers must not return its buffers (nor views of them) to their caller."""
    ws = getattr(_KEPT, "ws", None)
    if ws is None or ws.nbytes > KEEP_BYTES:
        ws = _KEPT.ws = Workspace()
    return ws


class _Fresh:
    """The no-workspace case: every request is a new tensor."""

    @staticmethod
    def get(name: str, shape, dtype: torch.dtype, device) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype, device=device)


FRESH = _Fresh()
