"""Eager attention: softmax(scale * Q K^T + mask) V written out op by op in the input dtype.

The paper's "baseline attention" as a training model runs it: every op in the tensors' own dtype
(or autocast's, when autocast is on: the matmuls then run in bf16/fp16 and the softmax in fp32, as
torch's autocast lists say). It is the one attention in attnum that *follows* torch's dtype rules
instead of a Policy, which is exactly what a low-precision training run needs.

Shape alphabet: B batch, H query heads, G key/value heads, N queries, S keys, d head dim.
Mask semantics are :mod:`attnum.attention.masks`' (bool True = attend, float added, top-left
``is_causal``, fully masked rows give 0). The scores are materialised (B, H, N, S) by design; the
mask costs no more than one bool tile of that size.
"""

from __future__ import annotations

import math

import torch

from attnum.attention import masks
from attnum.errors import AttnumInputError


def eager_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False, *, causal_alignment: str = "top_left", window=None):
    """(B, H, N, d) x (B, G, S, d) x (B, G, S, dv) -> (B, H, N, dv), differentiable, in the input dtype."""
    if dropout_p:
        raise AttnumInputError(f"dropout_p={dropout_p!r} is not allowed; expected 0.0")
    B, H, _, N, S, d, dv = masks.check_qkv(query, key, value)
    if S == 0:
        return torch.zeros(B, H, N, dv, dtype=value.dtype, device=value.device) + 0 * query.sum()
    p_BHNS = attention_weights(query, key, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                               causal_alignment=causal_alignment, window=window)
    return p_BHNS.to(value.dtype) @ masks.expand_kv(value, H)


def sdpa_math_attention(query, key, value, *, scale=None):
    """(B, H, N, d) x (B, H, S, d) x (B, H, S, dv) -> (B, H, N, dv): torch's math SDPA path op by op, as
    ``aten/src/ATen/native/transformers/attention.cpp`` (``_scaled_dot_product_attention_math``) writes it,
    no mask: 16-bit inputs upcast to fp32 first; Q and K each multiplied by sqrt(scale) (for stability,
    instead of the scores by scale); softmax of Q K^T; its product with V; the result cast back to the
    input dtype. The GEMMs are torch's own (the CPU's BLAS), as the path's are."""
    B, H, _, N, S, d, dv = masks.check_qkv(query, key, value)
    wide = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    q, k, v = (t.to(wide) for t in (query, key, masks.expand_kv(value, H)))
    k = masks.expand_kv(k, H)
    sf = math.sqrt(masks.resolve_scale(scale, d))
    attn = torch.softmax(torch.matmul(q * sf, k.transpose(-2, -1) * sf), dim=-1)
    return torch.matmul(attn, v).to(query.dtype)


def attention_weights(query, key, *, attn_mask=None, is_causal=False, scale=None,
                      causal_alignment: str = "top_left", window=None):
    """softmax(scale * Q K^T + mask) (B, H, N, S), op by op in the input dtype; fully masked rows 0.

    What ``nn.MultiheadAttention(need_weights=True)`` returns, and eager attention's probabilities.
    """
    B, H, N, d = query.shape
    S = key.shape[-2]
    key = masks.expand_kv(key, H)
    scale = masks.resolve_scale(scale, d)
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S), causal_alignment=causal_alignment, window=window)
    s_BHNS = (query @ key.transpose(-2, -1)) * scale
    t = mk.tile(0, N, 0, S, s_BHNS.dtype, s_BHNS.device)
    if t.additive is not None:
        s_BHNS = s_BHNS + t.additive
    if t.keep is not None:
        s_BHNS = s_BHNS.masked_fill(~t.keep, float("-inf"))
    # Fully masked rows: a finite placeholder before the softmax keeps autograd free of 0 * NaN;
    # their output is 0, as torch >= 2.5 SDPA gives.
    dead = torch.isneginf(s_BHNS).all(dim=-1, keepdim=True)
    return torch.softmax(s_BHNS.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
