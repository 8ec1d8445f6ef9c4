"""Two Triton serving kernels written for attnum's tests, each in a broken and a guarded form, broken the way two
upstream bugs of the corpus were (attnum.audit.bugs): a kernel attnum has never seen, audited through the plain
``triton-interpret:FILE.py:CLASS`` protocol with its declarations, never through a built-in adapter.

- ``BuggyMerge`` / ``GuardedMerge``: the two-state LSE merge (natural log) of chunked prefill, o (T, H, dv),
  lse (T, H). The broken one subtracts ``max(lse_a, lse_b)`` from both LSEs unguarded: two empty states give
  ``-inf - (-inf) = NaN`` (vLLM's Triton ``merge_attn_states`` before 0.26.0, SGLang's ``merge_state_triton``,
  FlashInfer's Triton ``merge_state``). The guarded one takes 0 for a max of -inf and writes (0, -inf).
- ``BuggyDecode`` / ``GuardedDecode``: one query per sequence over a contiguous cache q (B, H, 1, d), k/v
  (B, G, S, d), online softmax over tiles of 16 keys of its ``cache_seqlens``. The broken one ends with
  ``acc / l``: a sequence of length 0 gives 0 / 0 = NaN (vLLM#57017, SGLang's ``decode_attention_fwd``); the
  guarded one writes 0 there (the declared empty-row output).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


@triton.jit
def _merge(OA, LA, OB, LB, O, LO, D, GUARD: tl.constexpr, D_PAD: tl.constexpr):
    row = tl.program_id(0)  # one (token, head)
    offs = tl.arange(0, D_PAD)
    ok = offs < D
    la = tl.load(LA + row)
    lb = tl.load(LB + row)
    m = tl.maximum(la, lb)
    if GUARD:
        m = tl.where(m == float("-inf"), 0.0, m)  # two empty states: weights exp(-inf) = 0, not exp(NaN)
    wa = tl.exp(la - m)
    wb = tl.exp(lb - m)
    s = wa + wb
    oa = tl.load(OA + row * D + offs, mask=ok, other=0.0).to(tl.float32)
    ob = tl.load(OB + row * D + offs, mask=ok, other=0.0).to(tl.float32)
    if GUARD:
        o = tl.where(s > 0, (oa * wa + ob * wb) / tl.where(s > 0, s, 1.0), 0.0)
    else:
        o = (oa * wa + ob * wb) / s
    tl.store(O + row * D + offs, o.to(O.dtype.element_ty), mask=ok)
    tl.store(LO + row, m + tl.log(s))


def _merge_state(o_a, lse_a, o_b, lse_b, guard):
    T, H, dv = o_a.shape
    o = torch.empty_like(o_a)
    lse = torch.empty(T, H, dtype=torch.float32, device=o_a.device)
    _merge[(T * H,)](o_a.contiguous(), lse_a.float().contiguous(), o_b.contiguous(), lse_b.float().contiguous(), o,
                     lse, dv, GUARD=guard, D_PAD=triton.next_power_of_2(dv))
    return o, lse


class BuggyMerge:
    lse_base = "e"

    @staticmethod
    def merge_state(o_a, lse_a, o_b, lse_b):
        return _merge_state(o_a, lse_a, o_b, lse_b, False)


class GuardedMerge:
    lse_base = "e"

    @staticmethod
    def merge_state(o_a, lse_a, o_b, lse_b):
        return _merge_state(o_a, lse_a, o_b, lse_b, True)


BLOCK_N = 16


@triton.jit
def _decode(Q, K, V, O, LENS, sm_scale, H, G, S, D, DV, GUARD: tl.constexpr, BLOCK_N: tl.constexpr,
            D_PAD: tl.constexpr, DV_PAD: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    g = h // (H // G)
    L = tl.load(LENS + b)
    offs_d = tl.arange(0, D_PAD)
    offs_v = tl.arange(0, DV_PAD)
    q = tl.load(Q + (b * H + h) * D + offs_d, mask=offs_d < D, other=0.0).to(tl.float32)
    m = tl.full([1], float("-inf"), tl.float32)
    l_i = tl.zeros([1], tl.float32)
    acc = tl.zeros([DV_PAD], tl.float32)
    for start in range(0, L, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        key_ok = offs_n < L
        k = tl.load(K + ((b * G + g) * S + offs_n[:, None]) * D + offs_d[None, :],
                    mask=key_ok[:, None] & (offs_d[None, :] < D), other=0.0).to(tl.float32)
        v = tl.load(V + ((b * G + g) * S + offs_n[:, None]) * DV + offs_v[None, :],
                    mask=key_ok[:, None] & (offs_v[None, :] < DV), other=0.0).to(tl.float32)
        s = tl.where(key_ok, tl.sum(k * q[None, :], 1) * sm_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m = m_new
    if GUARD:
        o = tl.where(l_i > 0, acc / tl.where(l_i > 0, l_i, 1.0), 0.0)
    else:
        o = acc / l_i
    tl.store(O + (b * H + h) * DV + offs_v, o.to(O.dtype.element_ty), mask=offs_v < DV)


def _decode_call(q, k_cache, v_cache, cache_seqlens, block_table, return_lse, scale, guard):
    if block_table is not None or return_lse:
        raise NotImplementedError("contiguous cache, no LSE")
    B, H, N, d = q.shape
    G, S, dv = k_cache.shape[1], k_cache.shape[2], v_cache.shape[-1]
    if N != 1:
        raise NotImplementedError("one query per sequence")
    o = torch.empty(B, H, dv, dtype=q.dtype, device=q.device)
    lens = cache_seqlens.to(device=q.device, dtype=torch.int32).contiguous()
    _decode[(B, H)](q.contiguous(), k_cache.contiguous(), v_cache.contiguous(), o, lens,
                    1.0 / math.sqrt(d) if scale is None else float(scale), H, G, S, d, dv, GUARD=guard,
                    BLOCK_N=BLOCK_N, D_PAD=triton.next_power_of_2(d), DV_PAD=triton.next_power_of_2(dv))
    return o.unsqueeze(2)


class BuggyDecode:
    single_query_only = True
    split_rule = "fixed-size"  # one pass: num_splits is not a knob of this kernel

    @staticmethod
    def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
               is_causal=True, scale=None, return_lse=False):
        return _decode_call(q, k_cache, v_cache, cache_seqlens, block_table, return_lse, scale, False)


class GuardedDecode:
    single_query_only = True
    split_rule = "fixed-size"

    @staticmethod
    def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
               is_causal=True, scale=None, return_lse=False):
        return _decode_call(q, k_cache, v_cache, cache_seqlens, block_table, return_lse, scale, True)
