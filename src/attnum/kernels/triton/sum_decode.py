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

Memory is sized before it is allocated. A tile is held only as long as the longest split's live keys
(``min(block_k, j1 - j0)``): the masked keys past them are zeros, which add nothing to the key-after-key
P V sum (one ``+ 0`` turns a -0 into +0, and is kept) and whose place in numpy's pairwise sum of P is
replayed without them (:func:`_sum_padded`), so ``block_k = 10**9`` on 100 keys is the arithmetic of
``block_k = 10**9``, in the memory of 100 keys. Rows and splits are independent until the merge, so they
run in groups of at most :data:`STEP_ELEMS` tile elements. What is left is the caller's: the split
outputs (B H, splits, dv) beyond :data:`MAX_ELEMS` are refused in one line, and the plain reference,
which holds whole ``block_k`` tiles as the kernels do, refuses a tile past :data:`STEP_ELEMS`.

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
from attnum.kernels.triton.model import tree_sum
from attnum.kernels.triton.np_ops import exp_f32 as _exp
from attnum.kernels.triton.np_ops import log_f32 as _log
from attnum.kernels.triton.np_ops import mul_add as _mul_add
from attnum.kernels.triton.np_ops import mul_round as _mul
from attnum.kernels.triton.np_ops import sum_padded as _sum_padded
from attnum.kernels.triton.np_ops import tl_sum_last as _tl_sum_last
from attnum.numerics.formats import format_of_dtype
from attnum.numerics.rounding import round_to

_F32 = np.float32
STEP_ELEMS = 1 << 22
"""Tile elements (rows x splits x keys x (D + DV)) one step of :func:`sum_decode` holds (about 40 bytes
each with the float64 temporaries of a 16-bit format's products: ~170 MB)."""
MAX_ELEMS = 1 << 27
"""Elements of the split outputs (B H x splits x dv, float32) :func:`sum_decode` keeps for the merge."""


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


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _check(q_BHNd, k_BHSd, v_BHSd, bounds, block_k) -> tuple[str, list[tuple[int, int]]]:
    """(the input format, the bounds as int pairs); an AttnumInputError naming the first bad argument."""
    for name, x in (("q", q_BHNd), ("k", k_BHSd), ("v", v_BHSd)):
        if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.is_meta or x.dim() != 4:
            raise bad_value(name, x if not isinstance(x, torch.Tensor) else f"{x.layout} {x.device} "
                            f"{tuple(x.shape)}", "a dense 4-d torch.Tensor with values (B, H, S, d)")
    if q_BHNd.shape[2] != 1:
        raise bad_value("q", tuple(q_BHNd.shape), "(B, H, 1, d): one query per sequence")
    if k_BHSd.shape[:2] != q_BHNd.shape[:2] or v_BHSd.shape[:3] != k_BHSd.shape[:3] \
            or k_BHSd.shape[-1] != q_BHNd.shape[-1] or min(q_BHNd.shape[-1], v_BHSd.shape[-1]) < 1:
        raise bad_value("k/v", (tuple(k_BHSd.shape), tuple(v_BHSd.shape)),
                        "(B, H, S, d) and (B, H, S, dv) with q's B, H and d, and d, dv >= 1")
    if not _is_int(block_k) or block_k < 1:
        raise bad_value("block_k", block_k, "a positive integer")
    S = k_BHSd.shape[2]
    allowed = f"key ranges (j0, j1) of integers with 0 <= j0 and 0 <= j1 <= S = {S} (j1 <= j0: an empty split, skipped)"
    try:
        pairs = list(bounds)
    except TypeError:
        raise bad_value("bounds", bounds, allowed) from None
    for pair in pairs:
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2 \
                or not all(_is_int(j) for j in pair) or not (0 <= pair[0] and 0 <= pair[1] <= S):
            raise bad_value("bounds", bounds if len(repr(bounds)) < 200 else f"{pair!r} among them", allowed)
    fmt = format_of_dtype(q_BHNd.dtype).name if q_BHNd.is_floating_point() else None
    if fmt not in ("bf16", "fp16", "fp32"):
        raise bad_value("q", q_BHNd.dtype, "bfloat16, float16 or float32")
    if k_BHSd.dtype != q_BHNd.dtype or v_BHSd.dtype != q_BHNd.dtype:  # the kernels load one dtype
        raise bad_value("k/v", (k_BHSd.dtype, v_BHSd.dtype), f"q's dtype {q_BHNd.dtype}")
    return fmt, [(int(a), int(b)) for a, b in pairs]


def _padded(x_BHSd: torch.Tensor, fmt: str) -> np.ndarray:
    """(R, S, D) float32 values of ``fmt`` (rounded once from the caller's values), D the next power of 2."""
    B, H, S, d = x_BHSd.shape
    D = 1 << max(d - 1, 0).bit_length()
    out = np.zeros((B * H, S, D), _F32)
    out[:, :, :d] = round_to(x_BHSd.reshape(B * H, S, d).double(), fmt).float().numpy()
    return out


def _splits(qf, kf, vf, ranges, block_k, sm, fmt, fused):
    """Every non-empty split of every row at once, tile t of each split in one step: (acc / l (R, P, DV),
    lse (R, P)) in fp32. A split with fewer tiles keeps its state in the steps after its last one.
    Tiles are held ``bk = min(block_k, longest split)`` keys long (module docstring)."""
    R, P, DV = qf.shape[0], len(ranges), vf.shape[-1]
    j0 = np.array([a for a, _ in ranges])
    n_keys = np.array([b - a for a, b in ranges])
    bk = min(block_k, int(n_keys.max()))
    m = np.full((R, P), -np.inf, _F32)
    l_ = np.zeros((R, P), _F32)
    acc = np.zeros((R, P, DV), _F32)
    for t in range(-(-int(n_keys.max()) // block_k)):
        off = t * block_k + np.arange(bk)  # (bk,) key offsets inside the splits
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
        for j in range(1, bk):  # tl.sum over the tile's rows: numpy adds row after row
            s = np.add(s, pv[:, :, j], dtype=_F32)
        if bk < block_k:  # the masked rows past bk: + 0 each, of which only the first can change a bit (-0)
            s = np.add(s, _F32(0), dtype=_F32)
        acc = np.where(step[None, :, None], _mul_add(acc, r[..., None], s, fused), acc)
        l_ = np.where(step[None], _mul_add(l_, r, _sum_padded(p, block_k), fused), l_)
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
    fmt, bounds = _check(q_BHNd, k_BHSd, v_BHSd, bounds, block_k)
    B, H, _, d = q_BHNd.shape
    dv = v_BHSd.shape[-1]
    sm = _scale(scale, d)
    ranges = [(j0, j1) for j0, j1 in bounds if j1 > j0]
    if not ranges:
        raise bad_value("bounds", bounds, "at least one non-empty key range")
    R, P, D = B * H, len(ranges), 1 << max(d - 1, 0).bit_length()
    DV = 1 << max(dv - 1, 0).bit_length()
    if R * P * DV > MAX_ELEMS:
        raise bad_value("bounds", f"{P} non-empty splits", f"at most {MAX_ELEMS // max(1, R * DV)} for B H = {R} "
                        f"rows of dv = {dv} (the split outputs kept for the merge are capped at {MAX_ELEMS} elements)")
    qf = _padded(q_BHNd, fmt)[:, 0]
    kf, vf = _padded(k_BHSd, fmt), _padded(v_BHSd, fmt)
    # rows and splits in groups whose tiles hold at most STEP_ELEMS elements (independent until the merge)
    per = min(block_k, max(b - a for a, b in ranges)) * (D + DV)
    n_p = max(1, min(P, STEP_ELEMS // per))
    n_r = max(1, min(R, STEP_ELEMS // (per * n_p)))
    o = np.empty((R, P, DV), _F32)
    lse = np.empty((R, P), _F32)
    for r0 in range(0, R, n_r):
        for p0 in range(0, P, n_p):
            rows, cut = slice(r0, r0 + n_r), slice(p0, p0 + n_p)
            o[rows, cut], lse[rows, cut] = _splits(qf[rows], kf[rows], vf[rows], ranges[cut], block_k, sm, fmt, fused)
    o = _merge(o, lse, fused)[:, :dv]
    return round_to(torch.from_numpy(o).double(), fmt).to(q_BHNd.dtype).reshape(B, H, 1, dv)


def _scale(scale, d: int) -> np.float32:
    if scale is None:
        return _F32(1.0 / math.sqrt(d))
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not math.isfinite(scale):
        raise bad_value("scale", scale, "a finite number, or None for 1 / sqrt(d)")
    return _F32(scale)


def sum_decode_reference(q_BHNd: torch.Tensor, k_BHSd: torch.Tensor, v_BHSd: torch.Tensor, *, bounds,
                         block_k: int = 64, scale: float | None = None, fused: bool = True) -> torch.Tensor:
    """:func:`sum_decode`, one program per (batch, head, split) as the kernels are written: plain numpy
    on 1-d and 2-d arrays, ``numpy.sum`` where they call ``tl.sum`` on fp32."""
    fmt, bounds = _check(q_BHNd, k_BHSd, v_BHSd, bounds, block_k)
    B, H, _, d = q_BHNd.shape
    dv = v_BHSd.shape[-1]
    sm = _scale(scale, d)
    width = (1 << max(d - 1, 0).bit_length()) + (1 << max(dv - 1, 0).bit_length())
    if block_k * width > STEP_ELEMS:  # whole tiles, as the kernels hold them
        raise bad_value("block_k", block_k, f"at most {STEP_ELEMS // width} for the plain reference at d = {d}, "
                        f"dv = {dv} (it holds whole tiles; sum_decode holds only the live keys)")
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
