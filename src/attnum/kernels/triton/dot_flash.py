"""The arithmetic of Triton's flash-attention forward (the fused-attention tutorial's ``_attn_fwd_inner``),
as attnum's Triton model computes it.

Triton's fused-attention tutorial (``python/tutorials/06-fused-attention.py``, triton-lang/triton) and the
kernels written after it keep the softmax in base 2 with the scale folded into ``log2(e)`` and let the
tensor core accumulate O across the key tiles (``tl.dot(p, v, acc)``). One program owns a block of
query rows and walks the keys in tiles of ``BLOCK_N``, forward, from 0; per tile (the non-causal path)::

    qk = tl.dot(q, k)                                   # the MMA over d, from a zero accumulator
    m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)   # qk_scale = sm_scale * 1.44269504, fp32
    qk = qk * qk_scale - m_ij[:, None]                  # one fma under FP fusion
    p = tl.math.exp2(qk)
    l_ij = tl.sum(p, 1)
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + l_ij                            # one fma under FP fusion; l_i starts at 1.0
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(q.dtype), v, acc)                 # O is the MMA's accumulator (fp16 as written)
    m_i = m_ij

then ``acc / l_i`` cast to the output format. :func:`dot_flash` replays that under the faithful model
(:mod:`attnum.kernels.triton.faithful`): ``tl.dot`` as the architecture's MMA instructions
(:func:`attnum.numerics.mma.dense.matmul`, fp32 out, K in instruction steps, the accumulator chained);
``exp2`` correctly rounded (:func:`attnum.kernels.triton.model.exp2`); ``tl.sum`` of fp32 as Triton's
interpreter computes it (``numpy.sum`` along the tile: pairwise); with FP fusion (``fused``) ``a * b - c``
and ``a * b + c`` one fma (:func:`attnum.numerics.fma.fma_round`), else the product rounded first; casts
to nearest even. ``qk_scale`` is the fp32 product of the fp32 ``sm_scale`` (the launcher's fp32 scalar)
and the fp32 constant 1.44269504.

``dot_flash_reference`` has the same signature and is the plain mirror of one program per (batch, head),
tile by tile as the kernel is written; :func:`dot_flash` computes every head at once. Both return the same
bits (tests/kernels/triton/test_triton_dot_flash.py), and the tutorial-style kernel of
``examples/triton_tutorial/fused_attention.py``, interpreted under the faithful model, equals them bit for
bit there. A query row's arithmetic is its own (the MMA's rows are independent), so one row stands for
the kernel's block of ``BLOCK_M`` rows.

Shape alphabet: B batch, H heads, N = 1 query, S keys, d = dv head dim, R = B H rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnum.errors import bad_value
from attnum.kernels.triton.model import exp2 as exp2_32
from attnum.numerics.fma import fma_round
from attnum.numerics.formats import format_of_dtype
from attnum.numerics.rounding import round_to

_F32 = np.float32
LOG2E = 1.44269504  # the tutorial's constant (1/log(2)), as an fp32 literal
ARCHES = ("sm80", "sm89", "sm90", "sm100")  # the faithful Triton model's --arch (sm89 adds like sm80, sm100 like sm90)
_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class DotFlash:
    """One arithmetic of the family: the input format (P is cast to it before the P V dot: ``fp16`` as the
    tutorial is written, the input dtype in its bf16 edit; ``tl.dot`` takes one operand type), the
    architecture whose MMA runs ``tl.dot`` (``sm80`` stands for sm80 and sm89, ``sm90`` for sm90 and sm100:
    the same instructions' arithmetic for 16-bit operands), and whether FP fusion contracts ``a * b + c``."""

    inputs: str
    arch: str = "sm90"
    fused: bool = True

    def __post_init__(self) -> None:
        if self.inputs not in _TORCH:
            raise bad_value("inputs", self.inputs, f"one of {tuple(_TORCH)} (the tutorial's dots take 16-bit operands)")
        if self.arch not in ARCHES:
            raise bad_value("arch", self.arch, f"one of {ARCHES}")

    def spec(self) -> str:
        return f"tl-dot-flash:{self.inputs},mma={self.arch},{'fp-fusion' if self.fused else 'no-fp-fusion'}"

    def sites(self) -> dict[str, str]:
        """site -> format, in the names of :class:`attnum.numerics.policy.Policy`'s sites."""
        return {"scores": "fp32", "exp": "fp32", "probs": self.inputs, "row_sum": "fp32", "rescale": "fp32",
                "acc": "fp32", "out": self.inputs}

    def describe(self) -> dict[str, str]:
        return {
            "qk": f"tl.dot on {self.arch}'s MMA (fp32 out, from zero)",
            "softmax": "exp2 of qk * (sm_scale * log2 e) - m, m the running max of the scaled scores",
            "updates": "fma (FP fusion)" if self.fused else "multiply, then add",
            "p_sum": "numpy.sum (pairwise) over the tile, fp32",
            "pv": f"p cast to {self.inputs}, tl.dot onto O on {self.arch}'s MMA (the accumulator chained)",
            "normalize": "acc / l, fp32 division, once",
        }


def _check(q_BHNd, k_BHSd, v_BHSd, block_n) -> str:
    if q_BHNd.dim() != 4 or q_BHNd.shape[2] != 1:
        raise bad_value("q", tuple(q_BHNd.shape), "(B, H, 1, d): one query row")
    if k_BHSd.shape != v_BHSd.shape or k_BHSd.shape[:2] != q_BHNd.shape[:2] or k_BHSd.shape[-1] != q_BHNd.shape[-1]:
        raise bad_value("k/v", (tuple(k_BHSd.shape), tuple(v_BHSd.shape)), "(B, H, S, d), both")
    if isinstance(block_n, bool) or not isinstance(block_n, int) or block_n < 1:
        raise bad_value("block_n", block_n, "a positive integer")
    fmt = format_of_dtype(q_BHNd.dtype).name
    if fmt not in _TORCH:
        raise bad_value("q", q_BHNd.dtype, "bfloat16 or float16")
    return fmt


def _fma(a, b, c, fused: bool) -> np.ndarray:
    """fp32 ``a * b + c``: one rounding with FP fusion, else the product rounded first."""
    a, b, c = (torch.from_numpy(np.asarray(x, _F32)).double() for x in np.broadcast_arrays(a, b, c))
    if fused:
        return fma_round(a, b, c, "fp32").float().numpy()
    return round_to(round_to(a * b, "fp32") + c, "fp32").float().numpy()


def _mma(a: np.ndarray, b: np.ndarray, c: np.ndarray, fmt: str, arch: str) -> np.ndarray:
    """``tl.dot(a, b, c)``: a (.., M, K) and b (.., K, N) holding ``fmt`` values, c fp32; fp32 out."""
    from attnum.numerics.mma import dense as mma

    dt = _TORCH[fmt]
    out = mma.matmul(torch.from_numpy(a).to(dt), torch.from_numpy(b).to(dt), torch.from_numpy(np.asarray(c, _F32)),
                     arch=arch, out_format="fp32")
    return out.numpy()


def _cast(x: np.ndarray, fmt: str) -> np.ndarray:
    return round_to(torch.from_numpy(np.asarray(x, _F32)).double(), fmt).float().numpy()


def _exp2(x) -> np.ndarray:
    return exp2_32(torch.from_numpy(np.asarray(x, _F32))).float().numpy()


def _scale(sm: float) -> _F32:
    return np.multiply(_F32(sm), _F32(LOG2E), dtype=_F32)


def dot_flash(q_BHNd: torch.Tensor, k_BHSd: torch.Tensor, v_BHSd: torch.Tensor, *, block_n: int = 32,
              scale: float | None = None, arch: str = "sm90", fused: bool = True) -> torch.Tensor:
    """The tutorial kernel's output for one query row (module docstring), every head at once: (B, H, 1, d)
    in q's dtype. S need not be a multiple of ``block_n`` here (the last tile is padded with keys whose
    scores are -inf and whose values are 0, which changes nothing but the sums' order of zeros); the
    kernel itself needs it."""
    fmt = _check(q_BHNd, k_BHSd, v_BHSd, block_n)
    DotFlash(fmt, arch, fused)
    B, H, _, d = q_BHNd.shape
    S = k_BHSd.shape[2]
    qs = _scale(1.0 / math.sqrt(d) if scale is None else scale)
    q = q_BHNd.reshape(B * H, 1, d).float().numpy()
    k = k_BHSd.reshape(B * H, S, d).float().numpy()
    v = v_BHSd.reshape(B * H, S, d).float().numpy()
    R = B * H
    m = np.full((R, 1), -np.inf, _F32)
    l_ = np.ones((R, 1), _F32)
    acc = np.zeros((R, 1, d), _F32)
    for j0 in range(0, S, block_n):
        j1 = min(S, j0 + block_n)
        kt = np.zeros((R, d, block_n), _F32)
        vt = np.zeros((R, block_n, d), _F32)
        kt[:, :, :j1 - j0] = k[:, j0:j1].transpose(0, 2, 1)
        vt[:, :j1 - j0] = v[:, j0:j1]
        qk = _mma(q, kt, np.zeros((R, 1, block_n), _F32), fmt, arch)[:, 0]  # (R, bn)
        qk[:, j1 - j0:] = -np.inf
        m_ij = np.maximum(m, np.multiply(qk.max(axis=1, keepdims=True), qs, dtype=_F32))
        with np.errstate(invalid="ignore"):
            s = _fma(qk, qs, -m_ij, fused)
        p = _exp2(s)
        l_ij = np.sum(p, axis=1, keepdims=True, dtype=_F32)
        alpha = _exp2(np.subtract(m, m_ij, dtype=_F32))
        l_ = _fma(l_, alpha, l_ij, fused)
        acc = np.multiply(acc, alpha[:, :, None], dtype=_F32)
        acc = _mma(_cast(p, fmt)[:, None, :], vt, acc, fmt, arch)
        m = m_ij
    o = np.divide(acc[:, 0], l_, dtype=_F32)
    return round_to(torch.from_numpy(o).double(), fmt).to(q_BHNd.dtype).reshape(B, H, 1, d)


def dot_flash_reference(q_BHNd: torch.Tensor, k_BHSd: torch.Tensor, v_BHSd: torch.Tensor, *, block_n: int = 32,
                        scale: float | None = None, arch: str = "sm90", fused: bool = True) -> torch.Tensor:
    """:func:`dot_flash`, one program per (batch, head) as the kernel is written: per row, per tile."""
    fmt = _check(q_BHNd, k_BHSd, v_BHSd, block_n)
    DotFlash(fmt, arch, fused)
    B, H, _, d = q_BHNd.shape
    S = k_BHSd.shape[2]
    qs = _scale(1.0 / math.sqrt(d) if scale is None else scale)
    out = torch.empty(B, H, 1, d, dtype=q_BHNd.dtype)
    for b in range(B):
        for h in range(H):
            q = q_BHNd[b, h].float().numpy()  # (1, d)
            k, v = k_BHSd[b, h].float().numpy(), v_BHSd[b, h].float().numpy()
            m_i, l_i, acc = _F32(-np.inf), _F32(1.0), np.zeros((1, d), _F32)
            for start in range(0, S, block_n):
                n = min(block_n, S - start)
                kt = np.zeros((d, block_n), _F32)
                vt = np.zeros((block_n, d), _F32)
                kt[:, :n], vt[:n] = k[start:start + n].T, v[start:start + n]
                qk = _mma(q, kt, np.zeros((1, block_n), _F32), fmt, arch)[0]
                qk[n:] = -np.inf
                m_ij = max(m_i, np.multiply(qk.max(), qs, dtype=_F32))
                with np.errstate(invalid="ignore"):
                    s = _fma(qk, qs, -m_ij, fused)
                p = _exp2(s)
                l_ij = np.sum(p, dtype=_F32)
                alpha = _exp2(np.subtract(m_i, m_ij, dtype=_F32))
                l_i = _fma(l_i, alpha, l_ij, fused)
                acc = np.multiply(acc, alpha, dtype=_F32)
                acc = _mma(_cast(p, fmt)[None, :], vt, acc, fmt, arch)
                m_i = m_ij
            out[b, h] = round_to(torch.from_numpy(np.divide(acc, l_i, dtype=_F32)).double(), fmt).to(q_BHNd.dtype)
    return out
