"""Plain attention with a textbook softmax: fully masked rows give 0/0 = NaN.

BUGGY ON PURPOSE - an audit target for ``attnum audit examples/nan_softmax_attention.py:attention``.

Masked logits are -inf (correct), but the softmax is ``exp(s - max) / sum`` with no empty-row guard,
so a row with nothing to attend to computes exp(-inf - (-inf)) = NaN. This is SDPA before torch 2.5
(pytorch/pytorch#103749, #103963) and the eager MHA path of #160064. It also takes no ``enable_gqa``.
"""

from __future__ import annotations

import math

import torch


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """SDPA-compatible (B, H, N, d) x (B, H, S, d) x (B, H, S, dv) -> (B, H, N, dv)."""
    q, k, v = query.float(), key.float(), value.float()
    n, s = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * sc
    if is_causal:
        scores = scores.masked_fill(~torch.ones(n, s, dtype=torch.bool, device=q.device).tril(), -math.inf)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else scores + attn_mask
    m = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - m)
    return (p / p.sum(dim=-1, keepdim=True) @ v).to(query.dtype)
