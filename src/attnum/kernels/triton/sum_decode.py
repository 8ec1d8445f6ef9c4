"""The arithmetic of the element-wise Triton decode kernels, as attnum's Triton model computes it.

LightLLM's split-KV decode kernel and its descendants (SGLang's ``decode_attention_fwd``, vLLM's
``triton_decode_attention``) do not multiply tiles on the matrix unit. One program owns one query
head and one split and walks the split's keys in tiles of ``BLOCK_N`` from the split's start:

    qk = tl.sum(q[None, :] * k, 1) * sm_scale     # products in the input format, summed over d
    m' = max(m, max(qk)); r = exp(m - m'); p = exp(qk - m')
    acc = acc * r + tl.sum(p[:, None] * v, 0)      # fp32 products, summed over the tile's keys
    l = l * r + tl.sum(p, 0)
    split output acc / l (fp32), split LSE m + log(l)

and a second kernel merges the splits' (output, LSE) pairs online: ``acc = acc * s + e * o``,
``l = l * s + e`` with ``s = exp(m - m')`` and ``e = exp(lse - m')``, then ``acc / l`` cast to the
output format. :func:`sum_decode` replays that arithmetic under attnum's faithful Triton model
(:mod:`attnum.kernels.triton.faithful`): products rounded to their operands' format; ``tl.sum`` of
bf16/fp16 in the model's butterfly tree (:func:`attnum.kernels.triton.model.tree_sum`) and of fp32 as
Triton's interpreter computes it (``numpy.sum``: pairwise summation over d and over the tile's P,
key after key for P V, the tile's rows being its outer axis); ``exp`` correctly rounded
(:func:`attnum.kernels.triton.model.exp`); ``log`` numpy's float32 log, as the interpreter calls it;
with FP fusion (``fused``), ``a * b + c`` one fma (:func:`attnum.numerics.fma.fma_round`), the left
product when both operands are products. The head dimension is padded with zeros to the next power of
2 and the last tile of a split to ``block_k`` keys, as the kernels' ``BLOCK_DMODEL`` and masked loads
do: the zeros take part in the sums' order.

``sum_decode_reference`` has the same signature and is the plain mirror of one program per (batch,
head), element for element as the kernels are written; :func:`sum_decode` computes every head at once.
Both return the same bits (tests/kernels/triton/test_triton_sum_decode.py). A GPU's ``tl.sum`` reduces in its layout's
order (in-thread, then across lanes); this is the model's, not a GPU's.

Shape alphabet: B batch, H heads, N = 1 query, S keys, d / dv head dims (D / DV padded), R = B H rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnum.errors import bad_value
from attnum.kernels.triton.model import exp as exp32
from attnum.kernels.triton.model import tree_sum
from attnum.numerics.formats import format_of_dtype
from attnum.numerics.rounding import round_to

_F32 = np.float32


@dataclass(frozen=True)
class SumDecode:
    """One arithmetic of the family: the input format and whether FP fusion contracts ``a * b + c``."""

    inputs: str
    fused: bool = True

    def spec(self) -> str:
        return f"tl-sum-decode:{self.inputs},{'fp-fusion' if self.fused else 'no-fp-fusion'}"

    def sites(self) -> dict[str, str]:
        """site -> format, in the names of :class:`attnum.numerics.policy.Policy`'s sites."""
        return {"scores": "fp32", "exp": "fp32", "probs": "fp32", "row_sum": "fp32", "rescale": "fp32",
                "acc": "fp32", "out": self.inputs}

    def describe(self) -> dict[str, str]:
        fp32_sum = "numpy.sum (pairwise)"
        return {
            "qk_products": f"rounded to {self.inputs}",
            "qk_sum": f"butterfly tree in {self.inputs}" if self.inputs != "fp32" else fp32_sum,
            "pv_products": "rounded to fp32",
            "pv_sum": "key after key in fp32",
            "p_sum": fp32_sum,
            "updates": "fma (FP fusion)" if self.fused else "multiply, then add",
            "split_merge": "online, natural log",
        }


def _check(q_BHNd, k_BHSd, v_BHSd, bounds, block_k) -> str:
    if q_BHNd.dim() != 4 or q_BHNd.shape[2] != 1:
        raise bad_value("q", tuple(q_BHNd.shape), "(B, H, 1, d): one query per sequence")
    if k_BHSd.shape[:2] != q_BHNd.shape[:2] or v_BHSd.shape[:3] != k_BHSd.shape[:3] \
            or k_BHSd.shape[-1] != q_BHNd.shape[-1]:
        raise bad_value("k/v", (tuple(k_BHSd.shape), tuple(v_BHSd.shape)), "(B, H, S, d) and (B, H, S, dv)")
    if isinstance(block_k, bool) or not isinstance(block_k, int) or block_k < 1:
        raise bad_value("block_k", block_k, "a positive integer")
    S = k_BHSd.shape[2]
    if any(not (0 <= j0 and 0 <= j1 <= S) for j0, j1 in bounds):
        raise bad_value("bounds", bounds, f"key ranges (j0, j1) with 0 <= j0 and 0 <= j1 <= S = {S} "
                                          "(j1 <= j0: an empty split, skipped)")
    fmt = format_of_dtype(q_BHNd.dtype).name
    if fmt not in ("bf16", "fp16", "fp32"):
        raise bad_value("q", q_BHNd.dtype, "bfloat16, float16 or float32")
    return fmt


def _padded(x_BHSd: torch.Tensor, fmt: str) -> np.ndarray:
    """(R, S, D) float32 values of ``fmt`` (rounded once from the caller's values), D the next power of 2."""
    B, H, S, d = x_BHSd.shape
    D = 1 << max(d - 1, 0).bit_length()
    out = np.zeros((B * H, S, D), _F32)
    out[:, :, :d] = round_to(x_BHSd.reshape(B * H, S, d).double(), fmt).float().numpy()
    return out


def _tl_sum_last(x: np.ndarray, fmt: str) -> np.ndarray:
    """``tl.sum(x, -1)`` under the model: x holds ``fmt`` values (float32 carrier)."""
    if fmt == "fp32":
        return np.sum(np.ascontiguousarray(x, _F32), axis=-1, dtype=_F32)
    return tree_sum(torch.from_numpy(x), x.ndim - 1, fmt).numpy()


def _mul(a, b, fmt: str) -> np.ndarray:
    """An element-wise product of ``fmt`` values, rounded to ``fmt``."""
    if fmt == "fp32":
        return np.multiply(a, b, dtype=_F32)
    return round_to(torch.from_numpy(np.asarray(a, np.float64) * np.asarray(b, np.float64)), fmt).float().numpy()


def _mul_add(a, b, c, fused: bool) -> np.ndarray:
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


def _exp(x) -> np.ndarray:
    return exp32(torch.from_numpy(np.asarray(x, _F32))).float().numpy()


def _log(x: np.ndarray) -> np.ndarray:
    """numpy's float32 log, one value at a time (as each program calls it on its own scalar)."""
    return np.array([np.log(_F32(t)) for t in np.asarray(x, _F32).reshape(-1)], _F32).reshape(np.shape(x))


def _splits(qf, kf, vf, ranges, block_k, sm, fmt, fused):
    """Every non-empty split of every row at once, tile t of each split in one step: (acc / l (R, P, DV),
    lse (R, P)) in fp32. A split with fewer tiles keeps its state in the steps after its last one."""
    R, P, DV = qf.shape[0], len(ranges), vf.shape[-1]
    j0 = np.array([a for a, _ in ranges])
    n_keys = np.array([b - a for a, b in ranges])
    m = np.full((R, P), -np.inf, _F32)
    l_ = np.zeros((R, P), _F32)
    acc = np.zeros((R, P, DV), _F32)
    for t in range(-(-int(n_keys.max()) // block_k)):
        off = t * block_k + np.arange(block_k)  # (bk,) key offsets inside the splits
        live = off[None, :] < n_keys[:, None]  # (P, bk)
        idx = np.where(live, j0[:, None] + off[None, :], 0)
        k_t = np.where(live[None, :, :, None], kf[:, idx], _F32(0))  # (R, P, bk, D)
        v_t = np.where(live[None, :, :, None], vf[:, idx], _F32(0))
        qk = np.multiply(_tl_sum_last(_mul(qf[:, None, None, :], k_t, fmt), fmt), sm, dtype=_F32)
        qk = np.where(live[None], qk, _F32(-np.inf))
        step = t * block_k < n_keys  # (P,) splits with a tile t
        m_new = np.where(step, np.maximum(qk.max(axis=-1), m), m)
        r = _exp(np.where(step, m - m_new, _F32(0)))
        p = _exp(qk - m_new[..., None])
        pv = np.multiply(p[..., None], v_t, dtype=_F32)
        s = pv[:, :, 0].copy()
        for j in range(1, block_k):  # tl.sum over the tile's rows: numpy adds row after row
            s = np.add(s, pv[:, :, j], dtype=_F32)
        acc = np.where(step[None, :, None], _mul_add(acc, r[..., None], s, fused), acc)
        l_ = np.where(step[None], _mul_add(l_, r, _tl_sum_last(p, "fp32"), fused), l_)
        m = m_new
    return np.divide(acc, l_[..., None], dtype=_F32), np.add(m, _log(l_), dtype=_F32)


def _merge(o_RPv, lse_RP, fused: bool) -> np.ndarray:
    """The second stage: online merge of the splits' (o, lse) pairs in order; returns acc / l (fp32)."""
    R = o_RPv.shape[0]
    m = np.full(R, -np.inf, _F32)
    l_ = np.zeros(R, _F32)
    acc = np.zeros_like(o_RPv[:, 0])
    for s_ in range(o_RPv.shape[1]):
        o, lse = o_RPv[:, s_], lse_RP[:, s_]
        m_new = np.maximum(lse, m)
        s = _exp(m - m_new)
        e = _exp(lse - m_new)
        acc = _mul_add(acc, s[:, None], np.multiply(e[:, None], o, dtype=_F32), fused)
        l_ = _mul_add(l_, s, e, fused)
        m = m_new
    return np.divide(acc, l_[:, None], dtype=_F32)


def sum_decode(q_BHNd: torch.Tensor, k_BHSd: torch.Tensor, v_BHSd: torch.Tensor, *, bounds, block_k: int = 64,
               scale: float | None = None, fused: bool = True) -> torch.Tensor:
    """The element-wise Triton decode kernels' output (module docstring), every head at once.

    ``bounds``: the splits' key ranges ((j0, j1), ...), each walked in tiles of ``block_k`` from j0;
    empty ones (j1 <= j0) are skipped, as the kernels skip them. ``scale``: 1 / sqrt(d) by default (rounded to
    fp32, as the kernels pass it). ``fused``: Triton's FP fusion (on by default on NVIDIA).
    Returns (B, H, 1, dv) in q's dtype."""
    fmt = _check(q_BHNd, k_BHSd, v_BHSd, bounds, block_k)
    B, H, _, d = q_BHNd.shape
    dv = v_BHSd.shape[-1]
    sm = _F32(1.0 / math.sqrt(d) if scale is None else scale)
    qf = _padded(q_BHNd, fmt)[:, 0]
    kf, vf = _padded(k_BHSd, fmt), _padded(v_BHSd, fmt)
    ranges = [(j0, j1) for j0, j1 in bounds if j1 > j0]
    if not ranges:
        raise bad_value("bounds", bounds, "at least one non-empty key range")
    o = _merge(*_splits(qf, kf, vf, ranges, block_k, sm, fmt, fused), fused)[:, :dv]
    return round_to(torch.from_numpy(o).double(), fmt).to(q_BHNd.dtype).reshape(B, H, 1, dv)


def sum_decode_reference(q_BHNd: torch.Tensor, k_BHSd: torch.Tensor, v_BHSd: torch.Tensor, *, bounds,
                         block_k: int = 64, scale: float | None = None, fused: bool = True) -> torch.Tensor:
    """:func:`sum_decode`, one program per (batch, head, split) as the kernels are written: plain numpy
    on 1-d and 2-d arrays, ``numpy.sum`` where they call ``tl.sum`` on fp32."""
    fmt = _check(q_BHNd, k_BHSd, v_BHSd, bounds, block_k)
    B, H, _, d = q_BHNd.shape
    dv = v_BHSd.shape[-1]
    sm = _F32(1.0 / math.sqrt(d) if scale is None else scale)
    Q, K, V = _padded(q_BHNd, fmt)[:, 0], _padded(k_BHSd, fmt), _padded(v_BHSd, fmt)
    out = np.zeros((B * H, dv), _F32)

    def tl_sum(x, axis, f):  # x holds f values
        if f == "fp32":
            return np.sum(x, axis=axis)
        return tree_sum(torch.from_numpy(np.ascontiguousarray(x)), axis, f).numpy()

    def fma1(a, b, c):
        return _mul_add(np.asarray(a, _F32), np.asarray(b, _F32), np.asarray(c, _F32), fused)

    for row in range(B * H):
        q, k, v = Q[row], K[row], V[row]
        mids = []
        for j0, j1 in bounds:
            if j1 <= j0:
                continue
            e_max, e_sum, acc = _F32(-np.inf), _F32(0.0), np.zeros(v.shape[-1], _F32)
            for start in range(j0, j1, block_k):
                offs = np.arange(start, start + block_k)
                ok = offs < j1
                kt = np.where(ok[:, None], k[np.minimum(offs, k.shape[0] - 1)], _F32(0))
                vt = np.where(ok[:, None], v[np.minimum(offs, v.shape[0] - 1)], _F32(0))
                prod = np.multiply(q[None, :], kt, dtype=_F32) if fmt == "fp32" else _mul(q[None, :], kt, fmt)
                qk = np.multiply(tl_sum(prod, 1, fmt), sm, dtype=_F32)
                qk = np.where(ok, qk, _F32(-np.inf))
                n_e_max = _F32(max(qk.max(), e_max))
                re_scale = _exp(e_max - n_e_max)
                p = _exp(qk - n_e_max)
                acc = fma1(acc, re_scale, tl_sum(np.multiply(p[:, None], vt, dtype=_F32), 0, "fp32"))
                e_sum = fma1(e_sum, re_scale, tl_sum(p, 0, "fp32"))
                e_max = n_e_max
            mids.append((np.divide(acc, e_sum, dtype=_F32), _F32(e_max + np.log(_F32(e_sum)))))
        if not mids:
            raise bad_value("bounds", bounds, "at least one non-empty key range")
        e_max, e_sum, acc = _F32(-np.inf), _F32(0.0), np.zeros(v.shape[-1], _F32)
        for tv, tlogic in mids:
            n_e_max = _F32(max(tlogic, e_max))
            old_scale = _exp(e_max - n_e_max)
            exp_logic = _exp(tlogic - n_e_max)
            acc = fma1(acc, old_scale, np.multiply(exp_logic, tv, dtype=_F32))
            e_sum = fma1(e_sum, old_scale, exp_logic)
            e_max = n_e_max
        out[row] = np.divide(acc, e_sum, dtype=_F32)[:dv]
    return round_to(torch.from_numpy(out).double(), fmt).to(q_BHNd.dtype).reshape(B, H, 1, dv)
