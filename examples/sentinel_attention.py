"""A tiled online-softmax attention with FlashInfer's pre-#4401 bug: a finite -5e4 "minus infinity".

BUGGY ON PURPOSE - an audit target for ``attnum audit examples/sentinel_attention.py:attention``.

``MASK_VALUE = -5e4`` is both the fill for masked logits and the initial running max ``m_i``; a row
whose running max never rises above it is taken to be empty and returns zeros (flashinfer#4267).
Rows whose every logit is below -5e4 therefore come out as zeros, and masked keys leak when valid
logits sit just above -5e4. Random-input tests pass.
"""

from __future__ import annotations

import math

import torch
from kernel_utils import expand_kv, mask_bias  # sibling module: file targets can import siblings

MASK_VALUE = -5e4  # the bug: finite
BLOCK_K = 64


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA-compatible (B, H, N, d) x (B, G, S, d) x (B, G, S, dv) -> (B, H, N, dv)."""
    dtype = query.dtype
    q, k, v = query.float(), expand_kv(key.float(), query.shape[1]), expand_kv(value.float(), query.shape[1])
    n, s = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    keep, additive = mask_bias(attn_mask, is_causal, n, s, q.device)
    m_i = torch.full((*q.shape[:-1], 1), MASK_VALUE, device=q.device)
    l_i = torch.zeros_like(m_i)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], device=q.device)
    for j0 in range(0, s, BLOCK_K):
        s_ij = (q @ k[..., j0:j0 + BLOCK_K, :].transpose(-1, -2)) * sc + additive[..., j0:j0 + BLOCK_K]
        s_ij = s_ij.masked_fill(~keep[..., j0:j0 + BLOCK_K], MASK_VALUE)
        m_new = torch.maximum(m_i, s_ij.amax(-1, keepdim=True))
        p = torch.exp(s_ij - m_new)
        alpha = torch.exp(m_i - m_new)
        l_i = alpha * l_i + p.sum(-1, keepdim=True)
        acc = alpha * acc + p @ v[..., j0:j0 + BLOCK_K, :]
        m_i = m_new
    empty = m_i <= MASK_VALUE  # "the max never moved: the row must be empty"
    out = torch.where(empty, torch.zeros_like(acc), acc / l_i.clamp_min(1e-30))
    return out.to(dtype)
