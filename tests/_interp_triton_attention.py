"""A tiny Triton flash-attention forward (FlashAttention-2 Algorithm 1), written for attnum's tests.

Audited on CPU through ``triton-interpret:tests/_interp_triton_attention.py:attention``. One program
per (query block, batch x head); the key loop keeps the running max m_i, the running sum l_i and the
accumulator in fp32, masks the ragged last key tile and, with ``is_causal``, keys j > i (top-left).
Rows with no key give 0. Its dots ask for ``input_precision="ieee"`` (exact fp32 on the GPU);
``attention_tf32`` is the same kernel with Triton's NVIDIA default, TF32. ``attention_unmasked_tail`` is the same kernel with the tail mask dropped
from the scores (padded keys load as 0 and score 0): the bug class of flash-attn's
``test_flash_attn_bwd_overflow``. Shapes: q (B, H, N, d), k, v (B, H, S, d).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N = 64, 64


@triton.jit
def _fwd(Q, K, V, O, sm_scale, N, S, D,
         CAUSAL: tl.constexpr, MASK_TAIL: tl.constexpr, PRECISION: tl.constexpr,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D_PAD: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    row_ok = offs_m[:, None] < N
    d_ok = offs_d[None, :] < D
    q = tl.load(Q + bh * N * D + offs_m[:, None] * D + offs_d[None, :], mask=row_ok & d_ok, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    for start in range(0, S, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        key_ok = offs_n[:, None] < S
        k = tl.load(K + bh * S * D + offs_n[:, None] * D + offs_d[None, :], mask=key_ok & d_ok, other=0.0)
        v = tl.load(V + bh * S * D + offs_n[:, None] * D + offs_d[None, :], mask=key_ok & d_ok, other=0.0)
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision=PRECISION) * sm_scale
        keep = offs_m[:, None] >= 0
        if MASK_TAIL:
            keep = keep & (offs_n[None, :] < S)
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: nothing to rescale
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision=PRECISION)
        m_i = m_new
    out = tl.where(l_i[:, None] > 0, acc / tl.where(l_i[:, None] > 0, l_i[:, None], 1.0), 0.0)
    tl.store(O + bh * N * D + offs_m[:, None] * D + offs_d[None, :], out.to(O.dtype.element_ty), mask=row_ok & d_ok)


def _launch(query, key, value, is_causal, scale, mask_tail, precision="ieee"):
    B, H, N, d = query.shape
    S = key.shape[-2]
    q, k, v = (x.contiguous() for x in (query, key, value))
    o = torch.empty_like(q)
    sm_scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    grid = (triton.cdiv(N, BLOCK_M), B * H)
    _fwd[grid](q, k, v, o, sm_scale, N, S, d, CAUSAL=bool(is_causal), MASK_TAIL=mask_tail, PRECISION=precision,
               BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, D_PAD=max(16, triton.next_power_of_2(d)))
    return o


def _refuse(query, key, value, attn_mask):
    if attn_mask is not None:
        raise NotImplementedError("tiny triton attention: no attn_mask")
    if key.shape[1] != query.shape[1]:
        raise NotImplementedError("tiny triton attention: no GQA")
    if value.shape[-1] != query.shape[-1] or 0 in (query.shape[-2], key.shape[-2]):
        raise NotImplementedError("tiny triton attention: dv == d and N, S >= 1 only")


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    _refuse(query, key, value, attn_mask)
    return _launch(query, key, value, is_causal, scale, mask_tail=True)


def attention_unmasked_tail(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                            enable_gqa=False):
    _refuse(query, key, value, attn_mask)
    return _launch(query, key, value, is_causal, scale, mask_tail=False)


def attention_tf32(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    _refuse(query, key, value, attn_mask)
    return _launch(query, key, value, is_causal, scale, mask_tail=True, precision="tf32")
