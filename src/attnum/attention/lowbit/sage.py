"""SageAttention emulated: quantized Q K^T, exp2 online softmax, low-bit P V (see :mod:`attnum.numerics.lowbit`).

Shape alphabet: B batch, H heads, G kv heads, N queries, S keys, d head dim, dv value dim, Bc keys per tile.

The kernels' conventions (thu-ml/SageAttention ``sageattention/triton/attn_qk_int8_per_block.py``):
``sm_scale * 1.44269504`` folded into Q before it is quantized, so scores are in log2 units and
the softmax uses ``exp2``; ``qk = dot(q, k).to(fp32) * q_scale * k_scale``; masks -inf (causal);
``acc += dot(p.to(fp16), v, out_dtype=fp16)``; ``O = acc / l``.

:func:`sage_attention` is the tiled kernel (``block_k`` keys per step, online softmax in fp32, the
P V accumulator of ``lowbit.pv_acc``); :func:`sage_reference`, the plain reference with the same
signature, quantizes Q, K, V identically but takes the softmax over whole rows and P V exactly
(float64), so the two differ by the online softmax, P's tile-wise quantization and the accumulator.
"""

from __future__ import annotations

import math

import torch

from attnum.attention import masks, steps
from attnum.attention.lowbit.sage_quant import (
    LOG2E32,
    f32,
    mma_pv,
    quantize_blocks,
    quantize_groups,
    quantize_p,
    quantize_v,
    smooth_k,
    smooth_q,
)
from attnum.errors import bad_value
from attnum.numerics.lowbit import LowBit
from attnum.numerics.policy import Policy, parse_policy
from attnum.numerics.rounding import round_to


def _prepare(q, k, v, lb: LowBit, policy: Policy, scale: float | None, carrier=torch.float64):
    """Inputs rounded to ``policy.inputs``, K smoothed, Q scaled by sm_scale * log2(e) (and
    smoothed), both quantized; returns (score_fn(j0, j1) -> fp32 log2-domain scores, V values,
    V scale), all in ``carrier`` (float32 holds every one of these values exactly; its own
    arithmetic then rounds each operation as the kernel's fp32 does)."""
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    fin = policy.inputs
    q = round_to(q.double(), fin)  # site: inputs
    k = masks.expand_kv(round_to(k.double(), fin), H)
    v = masks.expand_kv(round_to(v.double(), fin), H)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if lb.smooth_k:
        k = smooth_k(k, fin)
    qs = f32(q * float(f32(torch.tensor(scale * LOG2E32, dtype=torch.float64))))  # x *= sm_scale (fp32)
    qm = None
    if lb.smooth_q:
        qs, qm = smooth_q(qs, lb)
    if lb.qk_is_block:
        qd, kd = quantize_blocks(qs, lb.qk), quantize_blocks(k, lb.qk)

        def score(j0, j1):  # block-scaled MMA, fp32 accumulation (modelled: exact, one rounding)
            return f32(qd @ kd[:, :, j0:j1].transpose(-1, -2)).to(carrier)
    else:
        qv, qsc = (t.to(carrier) for t in quantize_groups(qs, lb, "q", lb.qk))
        kv, ksc = (t.to(carrier) for t in quantize_groups(k, lb, "k", lb.qk))

        def score(j0, j1):
            s = qv @ kv[:, :, j0:j1].transpose(-1, -2)  # int32 (exact) or the FP8 MMA's fp32
            s = s if lb.qk_is_int else f32(s)
            return f32(f32(s * qsc) * ksc[:, :, j0:j1].transpose(-1, -2))  # * q_scale * k_scale
    if qm is not None:
        inner = score

        def score(j0, j1):  # SageAttention2: + mean(Q_block) . K^T in fp32
            return f32(inner(j0, j1) + f32(qm @ k[:, :, j0:j1].transpose(-1, -2)).to(carrier))
    vq, vsc = quantize_v(v, lb)
    return score, vq.to(carrier), vsc.to(carrier)


def _check(lb, attn_mask, window):
    if not isinstance(lb, LowBit):
        raise bad_value("lowbit", lb, "a LowBit scheme (attnum.numerics.lowbit.SAGE or LowBit(...))")
    if attn_mask is not None or window is not None:
        raise bad_value("attn_mask", "given", "None for SageAttention (no mask but causal, as its kernels)")


def _causal(s, i0, i1, j0, j1, N, S, alignment):
    keep = masks.causal_bool(N, S, alignment, device=s.device)[i0:i1, j0:j1]
    return s.masked_fill(~keep, float("-inf"))


@steps.no_autocast
def sage_attention(q, k, v, *, lowbit: LowBit, policy: str | Policy = "fa2:fp16", attn_mask=None,
                   is_causal: bool = False, scale: float | None = None, causal_alignment: str = "top_left",
                   window=None, return_lse: bool = False):
    """The tiled SageAttention forward -> O (B, H, N, dv) float32 on ``policy.out``'s grid (and the
    base-2 LSE log2(l) + m, (B, H, N), as the kernels store it). Every intermediate is an fp32
    value held in float32, so each float32 operation is the kernel's one fp32 rounding."""
    policy = parse_policy(policy)
    _check(lowbit, attn_mask, window)
    lb = lowbit
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    c = torch.float32
    score, vq, vsc = _prepare(q, k, v, lb, policy, scale, c)
    dev = vq.device
    m = torch.full((B, H, N, 1), -math.inf, dtype=c, device=dev)
    l = torch.zeros((B, H, N, 1), dtype=c, device=dev)
    acc = torch.zeros((B, H, N, dv), dtype=c, device=dev)
    static = 1.0
    for j0 in range(0, S, lb.block_k):
        j1 = min(S, j0 + lb.block_k)
        s = score(j0, j1)
        if is_causal:
            s = _causal(s, 0, N, j0, j1, N, S, causal_alignment)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = steps.safe_max(m_new)
        p = torch.exp2(s - m_safe)  # fp32 exp2 (site: exp)
        alpha = torch.exp2(m - m_safe)  # site: rescale
        l = l * alpha + p.sum(dim=-1, keepdim=True)  # site: row_sum (fp32 arithmetic)
        pq, div = quantize_p(p, lb)
        static = div if isinstance(div, float) else 1.0
        if lb.two_level:
            t = mma_pv(pq, vq[:, :, j0:j1], lb)
            t = t if isinstance(div, float) else f32(t / div)  # nvfp4: the per-row factor of this tile
            acc = f32(f32(acc * alpha) + t)  # site: acc (the fp32 buffer)
        else:
            acc = mma_pv(pq, vq[:, :, j0:j1], lb, acc=round_to(acc * alpha, lb.acc_format))
        m = m_new
    o = acc * vsc / static if static != 1.0 or lb.pv in ("e4m3fn", "e5m2", "int8", "nvfp4") else acc
    o = steps.zero_empty_rows_(o / l, l)
    o = round_to(o, policy.out)  # site: out
    if not return_lse:
        return o
    return o, (torch.log2(l) + m).squeeze(-1)


@steps.no_autocast
def sage_reference(q, k, v, *, lowbit: LowBit, policy: str | Policy = "fa2:fp16", attn_mask=None,
                   is_causal: bool = False, scale: float | None = None, causal_alignment: str = "top_left",
                   window=None):
    """The plain reference: the same quantized Q, K, V; materialized scores, the softmax over whole
    rows (P quantized from exp2(S - rowmax) as the scheme says), P V in float64, O = P V / l."""
    policy = parse_policy(policy)
    _check(lowbit, attn_mask, window)
    lb = lowbit
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    score, vq, vsc = _prepare(q, k, v, lb, policy, scale)
    s = score(0, S)
    if is_causal:
        s = _causal(s, 0, N, 0, S, N, S, causal_alignment)
    m = steps.safe_max(s.amax(dim=-1, keepdim=True))
    p = torch.exp2(s - m)
    l = p.sum(dim=-1, keepdim=True)
    pq, div = quantize_p(p, lb)
    o = (pq @ vq) * vsc
    o = o / div
    return round_to(steps.zero_empty_rows_(o / l, l), policy.out)
