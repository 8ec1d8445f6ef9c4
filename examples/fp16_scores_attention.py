"""Attention that forms Q K^T in the input dtype and scales afterwards: fp16 scores overflow.

BUGGY ON PURPOSE - an audit target for ``attnum audit examples/fp16_scores_attention.py:attention``.

In fp16 a raw dot product above 65504 is +inf before the scale can shrink it; softmax of a row
holding +inf is NaN. PaddlePaddle/Paddle#41933 (cuBLAS applied alpha after the product) and
ultralytics/ultralytics#24990 (fixed by pre-scaling the query). Correct in bf16 and fp32.
"""

from __future__ import annotations

import math

import torch
from kernel_utils import expand_kv, mask_bias


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA-compatible (B, H, N, d) x (B, G, S, d) x (B, G, S, dv) -> (B, H, N, dv)."""
    k, v = expand_kv(key, query.shape[1]), expand_kv(value, query.shape[1])
    sc = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    raw = query @ k.transpose(-1, -2)  # the bug: rounded to the input dtype before scaling
    keep, additive = mask_bias(attn_mask, is_causal, query.shape[-2], k.shape[-2], query.device)
    scores = (raw.float() * sc + additive).masked_fill(~keep, -math.inf)
    dead = torch.isneginf(scores).all(-1, keepdim=True)
    p = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return (p @ v.float()).to(query.dtype)
