"""Scratch tensors reused across a loop.

On CPU a fresh multi-megabyte tensor is mapped from the OS and page-faulted on first touch every
time (tens of milliseconds per 64 MB), which can cost more than the arithmetic done in it; hot loops
(the flash tile loop, golden's query chunks, in-place rounding) take their buffers from here.
"""

from __future__ import annotations

import torch


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


class _Fresh:
    """The no-workspace case: every request is a new tensor."""

    @staticmethod
    def get(name: str, shape, dtype: torch.dtype, device) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype, device=device)


FRESH = _Fresh()
