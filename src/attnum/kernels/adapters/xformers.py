"""``xformers``: ``xformers.ops.memory_efficient_attention`` behind the SDPA signature.

Layout (B, N, H, d). Masks become an additive ``attn_bias`` tensor (bool -> 0 / -inf), causal is
``LowerTriangularMask`` (top-left, like SDPA). GQA inputs are unsupported by this adapter (xformers
wants a 5-D grouped layout).
"""

from __future__ import annotations

import math

import torch

from attnum.kernels.protocol import sdpa_kernel

PACKAGE = "xformers"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    import xformers.ops as xops

    if key.shape[1] != query.shape[1]:
        raise NotImplementedError("xformers adapter: GQA needs xformers' 5-D layout")
    b, h, n, s = query.shape[0], query.shape[1], query.shape[-2], key.shape[-2]
    bias = None
    if attn_mask is not None:
        bias = torch.zeros(b, h, n, s, dtype=query.dtype, device=query.device)
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(~attn_mask, -math.inf)
        else:
            bias = bias + attn_mask.to(query.dtype)
        if is_causal:
            causal = torch.ones(n, s, dtype=torch.bool, device=query.device).tril()
            bias = bias.masked_fill(~causal, -math.inf)
    elif is_causal:
        bias = xops.LowerTriangularMask()
    out = xops.memory_efficient_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                          attn_bias=bias, p=dropout_p, scale=scale)
    return out.transpose(1, 2)


KERNELS = (
    sdpa_kernel("xformers", sdpa, package=PACKAGE, devices=("cpu", "cuda"), dtypes=DTYPES,
                doc="``xformers``: ``xformers.ops.memory_efficient_attention`` behind the SDPA signature."),
)
