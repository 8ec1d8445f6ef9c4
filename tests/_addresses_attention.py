"""A tiny Triton attention with one program per (batch, head), written for attnum's address-check tests.

Audited on CPU through ``triton-interpret:tests/_addresses_attention.py:attention``. The keys are loaded
as one block of ``S_PAD`` (S rounded up to a power of 2) rows; ``attention`` masks that load,
``attention_reads_past_k`` does not and masks only the scores: the padded rows of the last head read
past the end of K (for the other heads, the next head's rows), and what they hold never reaches the
output. The bug class of kernels that load a whole tile and rely on the score mask (the read is
harmless on the GPU when the memory is mapped, a fault when it is not). Shapes: q (B, H, N, d),
k, v (B, H, S, d), d a power of 2 >= 16.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd(Q, K, V, O, sm_scale, N, S, D: tl.constexpr, N_PAD: tl.constexpr, S_PAD: tl.constexpr,
         CAUSAL: tl.constexpr, MASK_K: tl.constexpr):
    bh = tl.program_id(0)
    offs_n = tl.arange(0, N_PAD)
    offs_s = tl.arange(0, S_PAD)
    offs_d = tl.arange(0, D)
    row_ok = offs_n[:, None] < N
    key_ok = offs_s[:, None] < S
    q = tl.load(Q + bh * N * D + offs_n[:, None] * D + offs_d[None, :], mask=row_ok, other=0.0)
    k_ptrs = K + bh * S * D + offs_s[:, None] * D + offs_d[None, :]
    if MASK_K:
        k = tl.load(k_ptrs, mask=key_ok, other=0.0)
    else:
        k = tl.load(k_ptrs)
    v = tl.load(V + bh * S * D + offs_s[:, None] * D + offs_d[None, :], mask=key_ok, other=0.0)
    s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee") * sm_scale
    keep = offs_s[None, :] < S
    if CAUSAL:
        keep = keep & (offs_s[None, :] <= offs_n[:, None])
    s = tl.where(keep, s, float("-inf"))
    m = tl.max(s, 1)
    p = tl.exp(s - tl.where(m == float("-inf"), 0.0, m)[:, None])
    l_i = tl.sum(p, 1)
    out = tl.dot(p, v.to(tl.float32), input_precision="ieee") / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(O + bh * N * D + offs_n[:, None] * D + offs_d[None, :], out.to(O.dtype.element_ty), mask=row_ok)


def _launch(query, key, value, attn_mask, is_causal, scale, mask_k):
    B, H, N, d = query.shape
    S = key.shape[-2]
    if attn_mask is not None or key.shape[1] != H or value.shape[-1] != d or d < 16 or d & (d - 1) or 0 in (N, S):
        raise NotImplementedError("tiny triton attention: no attn_mask or GQA; dv == d, a power of 2 >= 16; N, S >= 1")
    q, k, v = (x.contiguous() for x in (query, key, value))
    o = torch.empty_like(q)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    _fwd[(B * H,)](q, k, v, o, sm_scale, N, S, D=d, N_PAD=max(16, triton.next_power_of_2(N)),
                   S_PAD=max(16, triton.next_power_of_2(S)), CAUSAL=bool(is_causal), MASK_K=mask_k)
    return o


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _launch(query, key, value, attn_mask, is_causal, scale, mask_k=True)


def attention_reads_past_k(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                           enable_gqa=False):
    return _launch(query, key, value, attn_mask, is_causal, scale, mask_k=False)
