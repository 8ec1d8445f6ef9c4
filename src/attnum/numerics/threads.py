"""torch at one intra-op thread for a block of small element-wise work.

    with one_thread():  # torch.get_num_threads() == 1 inside; the caller's count restored after
        ...

Small passes (a few thousand elements, a GEMM of a tile) split over an OpenMP team wait on the hand-off;
on a loaded machine that costs more than the pass itself.
"""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def one_thread():
    """torch at one intra-op thread inside the block; the caller's count restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
