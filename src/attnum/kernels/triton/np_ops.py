"""Triton's interpreter's float arithmetic on numpy arrays, as :mod:`attnum.kernels.triton.sum_decode` replays it.

Each function is one operation of the element-wise decode kernels under attnum's faithful Triton model
(:mod:`attnum.kernels.triton.faithful`), on float32 carriers: a product rounded to its operands' format,
an fp32 multiply-add (one fma under FP fusion), ``tl.sum`` (the model's butterfly tree for bf16/fp16,
``numpy.sum``'s pairwise summation for fp32, as the interpreter calls it, also over a tile padded with
zeros that are never allocated), ``exp`` correctly rounded and numpy's float32 ``log``.
"""

from __future__ import annotations

import numpy as np
import torch

from attnum.kernels.triton.model import exp as exp32
from attnum.kernels.triton.model import tree_sum
from attnum.numerics.rounding import round_to

_F32 = np.float32
_PW_BLOCK = 128  # numpy's PW_BLOCKSIZE: pairwise_sum sums up to this many elements with 8 accumulators


def tl_sum_last(x: np.ndarray, fmt: str) -> np.ndarray:
    """``tl.sum(x, -1)`` under the model: x holds ``fmt`` values (float32 carrier)."""
    if fmt == "fp32":
        return np.sum(np.ascontiguousarray(x, _F32), axis=-1, dtype=_F32)
    return tree_sum(torch.from_numpy(x), x.ndim - 1, fmt).numpy()


def sum_padded(x: np.ndarray, n: int) -> np.ndarray:
    """``numpy.sum(x padded with zeros to n, axis=-1)`` in float32 without the zeros: numpy's pairwise
    summation (``pairwise_sum`` in numpy/_core/src/umath/loops_utils.h.src: up to 128 elements in 8
    accumulators, above that the two halves cut at a multiple of 8), replayed down to the blocks that
    hold values; a block of zeros sums to +0. x (..., L) float32 with L <= n."""
    L = x.shape[-1]
    if L == n:
        return np.sum(np.ascontiguousarray(x, _F32), axis=-1, dtype=_F32)
    if n <= _PW_BLOCK:
        full = np.zeros((*x.shape[:-1], n), _F32)
        full[..., :L] = x
        return np.sum(full, axis=-1, dtype=_F32)
    n2 = n // 2 - (n // 2) % 8
    left = sum_padded(x[..., :min(L, n2)], n2)
    right = sum_padded(x[..., n2:], n - n2) if L > n2 else _F32(0)
    return np.add(left, right, dtype=_F32)


def mul_round(a, b, fmt: str) -> np.ndarray:
    """An element-wise product of ``fmt`` values, rounded to ``fmt``."""
    if fmt == "fp32":
        return np.multiply(a, b, dtype=_F32)
    return round_to(torch.from_numpy(np.asarray(a, np.float64) * np.asarray(b, np.float64)), fmt).float().numpy()


def mul_add(a, b, c, fused: bool) -> np.ndarray:
    """fp32 ``a * b + c``: one fma with FP fusion (:func:`attnum.numerics.fma.fma_round`'s algorithm in
    numpy: the exact float64 product, a TwoSum, the sum rounded to odd, then one rounding to fp32),
    else the product rounded first."""
    if not fused:
        return np.add(np.multiply(a, b, dtype=_F32), c, dtype=_F32)
    a, b, c = (np.asarray(x, np.float64) for x in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0, inf - inf: NaN, as IEEE has it
        p = a * b
        s = p + c
        bb = s - p
        e = (p - (s - bb)) + (c - bb)
    bits = np.abs(s).view(np.int64)
    away = (e != 0) & ((e > 0) == (s > 0))
    toward = (e != 0) & ~away
    even = (bits & 1) == 0
    bits = np.where(away & even, bits + 1, np.where(toward & even, bits - 1, bits))
    s_odd = np.copysign(bits.view(np.float64), s)
    return np.where(np.isfinite(s), s_odd, s).astype(_F32)


def exp_f32(x) -> np.ndarray:
    return exp32(torch.from_numpy(np.asarray(x, _F32))).float().numpy()


def log_f32(x: np.ndarray) -> np.ndarray:
    """numpy's float32 log, one value at a time (as each program calls it on its own scalar)."""
    return np.array([np.log(_F32(t)) for t in np.asarray(x, _F32).reshape(-1)], _F32).reshape(np.shape(x))
