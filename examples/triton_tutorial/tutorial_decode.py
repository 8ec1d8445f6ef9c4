"""The tutorial-style kernel (``fused_attention.py``; for bf16 with P cast to the input dtype, as ``fused_attention_bf16.py``) called for one query row, as ``attnum fingerprint``
calls a kernel: q (B, H, 1, d) against S keys (docs/fingerprint.md, "Worked examples").

The kernel is self-attention (one ``N_CTX`` for queries and keys) without bounds masks, so the wrapper
places the query in row 0 of a (B, H, S, d) block of zero queries and launches the kernel's first query
block only (grid (1, B * H): rows 0 .. BLOCK_M - 1, each row's arithmetic its own), then returns row 0.
It refuses (NotImplementedError) what the unmasked kernel would read past: S not a multiple of
BLOCK_M = 64 and of BLOCK_N, and everything ``tutorial_sdpa.sdpa`` refuses. The kernel itself, its
BLOCK_N (``fused_attention.BLOCK_N``) and its arithmetic are untouched.

    attnum fingerprint triton-interpret:examples/triton_tutorial/tutorial_decode.py:sdpa --dtype fp16 \\
        --lengths 512,1280
"""

from __future__ import annotations

import math

import fused_attention
import torch


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    B, H, N, d = query.shape
    S = key.shape[-2]
    if attn_mask is not None or is_causal or dropout_p:
        raise NotImplementedError("tutorial decode wrapper: no mask, no causal, no dropout")
    if N != 1 or key.shape != value.shape or key.shape[:2] != (B, H) or key.shape[-1] != d:
        raise NotImplementedError("tutorial decode wrapper: one query row, k and v of one shape (B, H, S, d)")
    if d not in (32, 64, 128, 256):
        raise NotImplementedError("tutorial kernel: head dim in {32, 64, 128, 256}")
    if query.dtype not in (torch.float16, torch.bfloat16) or key.dtype != query.dtype or value.dtype != query.dtype:
        raise NotImplementedError("tutorial kernel: fp16 (as written) or bf16 (P cast to the input dtype)")
    block_m, block_n = fused_attention.BLOCK_M, fused_attention.BLOCK_N
    if S % block_m or S % block_n:
        raise NotImplementedError(f"tutorial kernel: S a multiple of BLOCK_M={block_m} and BLOCK_N={block_n} "
                                  "(its loads have no bounds masks)")
    q = torch.zeros(B, H, S, d, dtype=query.dtype)
    q[:, :, :1] = query
    k, v = key.contiguous(), value.contiguous()
    o = torch.zeros_like(q)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    fused_attention._attn_fwd[(1, B * H)](q, k, v, o, sm_scale, S, HEAD_DIM=d, CAUSAL=False,
                                          P_AS_Q=query.dtype == torch.bfloat16, BLOCK_M=block_m, BLOCK_N=block_n)
    return o[:, :, :1].clone()
