"""The size of the terms each golden element sums: T_i = sum_j |a_ij b_j|, in float64.

The verdict (:mod:`attnum.audit.verdict`) allows each element an error of c(fmt, n) * T_i on top
of FA's rule, so an element whose exact value is a cancelling sum (T_i >> |g_i|) is judged by the
rounding-error analysis of that sum rather than by the noise of the baseline's error there.
Everything here is golden side: float64 values of the case's inputs, never the target's.

Shapes: q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv), w = dO (B, H, N, dv).

- O  = P V          T_O  = P |V|          n = S           (P >= 0: the golden attention of |V|)
- dV = P^T dO       T_dV = P^T |dO|       n = N H / G     (the golden dV of the cotangent |dO|)
- dQ = s dS K       T_dQ = s |dS| |K|     n = S
- dK = s dS^T Q     T_dK = s |dS|^T |Q|   n = N H / G

where dS = dL/dscores, the gradient of the golden attention with respect to an additive mask (the
case's own masking, made one float64 bias so that autograd reaches it). Only backward probes build
this (B, H, N, S) bias; their shapes are small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.attention import masks
from attnum.attention.golden import golden_attention


def output_terms(q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> tuple[torch.Tensor, int]:
    """(T_O (B, H, N, dv) float64, n = S): sum_j P_ij |V_jc| of the golden probabilities."""
    t = golden_attention(q, k, v.double().abs(), attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    return t, k.shape[-2]


def score_order_terms(q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
    """(B, H, N, dv) float64: sum_j P_ij |V_jc - O_ic| s |q_i| . |k_j|, the first-order change of O when
    each score s_ij moves by its size s |q_i| . |k_j| -- times c(fp32, d) it bounds what the summation
    order of the q . k dot (prescaled q or k, scale after, any blocking) can do to the output. The
    score-side counterpart of the dS terms the gradient probes use (T_dQ = s |dS| |K|)."""
    B, H, G, N, S, d, _ = masks.check_qkv(q, k, v)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    bias = _dense_bias(attn_mask, is_causal, (B, H, N, S))
    qd, kd, vd = (x.detach().to("cpu", torch.float64) for x in (q, k, v))
    kd, vd = masks.expand_kv(kd, H), masks.expand_kv(vd, H)
    logits = sc * (qd @ kd.transpose(-1, -2)) + bias
    p = torch.softmax(logits, dim=-1).nan_to_num(0.0)  # rows with no key: no terms
    o = p @ vd
    size = sc * (qd.abs() @ kd.abs().transpose(-1, -2))  # (B, H, N, S)
    spread = (vd.unsqueeze(2) - o.unsqueeze(3)).abs()  # (B, H, N, S, dv)
    return torch.einsum("bhns,bhns,bhnsc->bhnc", p, size, spread)


@dataclass(frozen=True, kw_only=True)
class GradTerms:
    """Golden gradients [dq, dk, dv] (float64, CPU), their term sizes, and each one's n."""

    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    terms: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    n: tuple[int, int, int]


def _dense_bias(attn_mask, is_causal: bool, shape_BHNS: tuple[int, int, int, int]) -> torch.Tensor:
    """The case's masking as one float64 additive bias (B, H, N, S): the masks module's additive
    part, -inf where its keep is False."""
    B, H, N, S = shape_BHNS
    tile = masks.masking(attn_mask, is_causal, shape_BHNS).tile(0, N, 0, S, torch.float64, torch.device("cpu"))
    bias = torch.zeros(B, H, N, S, dtype=torch.float64)
    if tile.additive is not None:
        bias = bias + tile.additive
    return masks.apply_keep_(bias, tile.keep)


def grad_terms(q, k, v, w, *, attn_mask=None, is_causal=False, scale=None) -> GradTerms:
    """Golden dq, dk, dv of loss = sum(O * w) by float64 autograd, with T_dQ, T_dK, T_dV."""
    B, H, G, N, S, d, _ = masks.check_qkv(q, k, v)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    qd, kd, vd = (x.detach().to("cpu", torch.float64).requires_grad_(True) for x in (q, k, v))
    bias = _dense_bias(attn_mask, is_causal, (B, H, N, S)).requires_grad_(True)
    w = w.to("cpu", torch.float64)
    with torch.enable_grad():
        o = golden_attention(qd, kd, vd, attn_mask=bias, scale=sc)
        dq, dk, dv, ds = torch.autograd.grad(o, (qd, kd, vd, bias), w, retain_graph=True, allow_unused=True)
        (t_dv,) = torch.autograd.grad(o, (vd,), w.abs(), allow_unused=True)
    # None: the input does not reach the output (S = 0); its gradient is 0.
    dq, dk, dv, t_dv = (torch.zeros_like(x) if g is None else g
                        for g, x in zip((dq, dk, dv, t_dv), (qd, kd, vd, vd), strict=True))
    ds = torch.zeros(B, H, N, S, dtype=torch.float64) if ds is None else ds.abs()
    k_abs = masks.expand_kv(kd.detach().abs(), H)
    t_dq = sc * (ds @ k_abs)  # (B, H, N, d)
    t_dk = sc * (ds.transpose(-1, -2) @ qd.detach().abs())  # (B, H, S, d), summed over each group's heads
    t_dk = t_dk.reshape(B, G, H // G, S, d).sum(dim=2)
    n_kv = N * (H // G)
    return GradTerms(grads=(dq.detach(), dk.detach(), dv.detach()), terms=(t_dq, t_dk, t_dv.detach()),
                     n=(S, n_kv, n_kv))
