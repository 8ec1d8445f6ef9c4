"""What one tensor argument of a kernel may reach: the bytes of its view's elements, as an interval and,
for a view with gaps, its nested strides. Used by :mod:`attnum.kernels.triton.addresses` to check each
access of an interpreted Triton kernel; :func:`inside` is vectorized (numpy over the lanes of an access),
:func:`inside_reference` is the plain definition by enumeration it is tested against.

A view reaches its own elements, not the rest of its base's storage: ``kv_cache[:, 0]`` of a
[blocks, 2, P, G, d] cache reaches the key halves, not the value halves between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Extent:
    """What one tensor argument may reach, in absolute bytes: ``[lo, hi)`` from its first element to the
    end of its last; ``dims`` ((size, stride in bytes), outermost first) when the view has gaps between
    its elements and its dimensions nest (each stride past the whole of the dimensions inside it), else
    None (every byte of the span is an element's)."""

    name: str
    lo: int
    hi: int
    itemsize: int
    dims: tuple[tuple[int, int], ...] | None = None
    shape: tuple[int, ...] = ()  # the view's sizes and strides (in elements), as torch gave them
    strides: tuple[int, ...] = ()
    dtype: str = ""

    @property
    def what(self) -> str:
        """``(64, 2, 64) bfloat16``: for messages."""
        return f"{self.shape} {self.dtype}"


def extent(name: str, t) -> Extent:
    """The :class:`Extent` of the torch tensor ``t`` (a view: sizes, strides, offset) named ``name``."""
    item, lo = t.element_size(), int(t.data_ptr())
    view = {"shape": tuple(t.shape), "strides": tuple(t.stride()), "dtype": str(t.dtype).removeprefix("torch.")}
    if t.numel() == 0:
        return Extent(name=name, lo=lo, hi=lo, itemsize=item, **view)
    live = sorted(((int(n), int(s) * item) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1 and s > 0),
                  key=lambda d: -d[1])
    span = sum((n - 1) * s for n, s in live) + item
    dims = None
    if span > math.prod(n for n, _ in live) * item:  # gaps between elements: are they decidable per dim?
        inner, nested = item, True
        for n, s in reversed(live):
            nested &= s >= inner
            inner = (n - 1) * s + inner
        dims = tuple(live) if nested else None
    return Extent(name=name, lo=lo, hi=lo + span, itemsize=item, dims=dims, **view)


def _starts(e: Extent, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For byte offsets ``off`` (int64) from ``e.lo``: whether each lies in an element, and that
    element's offset (the decomposition by nested strides is unique)."""
    r, ok = off.copy(), (off >= 0) & (off < e.hi - e.lo)
    for n, s in e.dims:
        i = r // s
        ok &= i < n
        r -= i * s
    ok &= r < e.itemsize
    return ok, off - r


def inside(e: Extent, addr: np.ndarray, width: int) -> np.ndarray:
    """Whether each access of ``width`` bytes at ``addr`` (uint64, untagged) lies wholly in ``e``'s
    elements. Vectorized; :func:`inside_reference` is the plain definition."""
    a = addr.astype(np.int64) - e.lo
    ok = (a >= 0) & (a + width <= e.hi - e.lo)
    if e.dims is None or not ok.any():
        return ok
    if width > e.itemsize:  # wider than an element (a reinterpreting load): every byte, one by one
        for j in range(width):
            ok &= _starts(e, a + j)[0]
        return ok
    first_in, first = _starts(e, a)
    last_in, last = _starts(e, a + width - 1)
    # both ends in elements, and no gap between them (the same element or adjacent ones)
    return ok & first_in & last_in & ((last - first == 0) | (last - first == e.itemsize))


def inside_reference(e: Extent, addr: np.ndarray, width: int) -> np.ndarray:
    """:func:`inside` by enumeration: every byte of each access must be a byte of one of the view's
    elements (``e.shape``, ``e.strides``, the view starting at ``e.lo``). For small views (tests)."""
    import itertools

    owned = set()
    for idx in itertools.product(*(range(n) for n in e.shape)):
        start = e.lo + sum(i * s for i, s in zip(idx, e.strides, strict=True)) * e.itemsize
        owned.update(range(start, start + e.itemsize))
    return np.array([all(int(a) + j in owned for j in range(width)) for a in addr.reshape(-1)], dtype=bool)
