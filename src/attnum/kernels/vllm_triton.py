"""``vllm-unified`` / ``vllm-triton-merge``: vLLM's Triton attention (``vllm.v1.attention.ops``).

- ``unified_attention``: variable-length prefill and decode over a paged cache (pages
  (n, P, G, d), ``block_table``, ``seqused_k``, ``cu_seqlens_q``); the queries are the last positions of
  each sequence (bottom-right causal). ``num_splits`` > 1 takes its 3D path (``num_par_softmax_segments``
  segments, then ``reduce_segments``). As SDPA: q (B, H, N, d) become B sequences of N queries over
  S keys, the contiguous K/V cut into pages of 16. It returns no LSE.
- ``merge_attn_states`` (the Triton one): two-state merge, LSE head-major (H, T), natural log.
- ``triton_decode_attention.decode_attention_fwd``: one query per sequence over a paged cache
  (``req_to_token`` = the block table, ``page_size``), ``num_kv_splits`` splits, and an LSE output;
  ``vllm-mla-decode``: the same entry with ``is_mla=True`` (the grouped kernel for H / G > 1; MLA: a latent cache whose
  first dv dims are the values, declared ``attnum_mla``; the mla-latent-decode probe).

From the installed ``vllm`` or the pinned wheel (``attnum kernels fetch vllm``; attnum.kernels.wheels).
On CPU through Triton's interpreter (GPU arithmetic: attnum.kernels.triton_faithful), with CUDA natively.
"""

from __future__ import annotations

import math

import torch

from attnum.kernels import serving_layout as lay
from attnum.kernels import wheels
from attnum.kernels.serving import ServingTarget

PACKAGE = "vllm"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_OPS = "vllm.v1.attention.ops."
PAGE = 16


def _mod(name: str):
    return wheels.load(PACKAGE, _OPS + name)


def _unified(q_tok, k_pages, v_pages, out_tok, *, cu_q, used_k, max_q, scale, causal, table, num_splits):
    T, H, d = q_tok.shape
    kw = {}
    if num_splits > 1:
        hp = 1 << (d - 1).bit_length()
        f32 = dict(dtype=torch.float32, device=q_tok.device)
        kw = dict(seq_threshold_3D=1 << 30, num_par_softmax_segments=num_splits,
                  softmax_segm_output=torch.empty(T, H, num_splits, hp, **f32),
                  softmax_segm_max=torch.empty(T, H, num_splits, **f32),
                  softmax_segm_expsum=torch.empty(T, H, num_splits, **f32))
    _mod("triton_unified_attention").unified_attention(
        q_tok, k_pages, v_pages, out_tok, cu_q, max_q, used_k, max(int(used_k.max()), 1), scale, causal, (-1, -1),
        table, 0.0, None, None, None, **kw)
    return out_tok


def _check(q, v):
    if v.shape[-1] != q.shape[-1]:
        raise NotImplementedError("vllm unified_attention: head dim of V == head dim of Q only")


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Prefill: B sequences of N queries, the last N of S positions."""
    lay.refuse_sdpa_extras("vllm unified_attention", query, key, attn_mask, enable_gqa)
    B, H, N, d = query.shape
    S = key.shape[2]
    if 0 in (N, S):
        raise NotImplementedError("vllm unified_attention: N, S >= 1")
    _check(query, value)
    kp, vp, table = lay.pages_of(key, value, [S] * B, PAGE)
    dev = query.device
    cu_q = torch.arange(0, (B + 1) * N, N, dtype=torch.int32, device=dev)
    used = torch.full((B,), S, dtype=torch.int32, device=dev)
    out = torch.empty(B * N, H, d, dtype=query.dtype, device=dev)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    _unified(lay.tokens(query), kp, vp, out, cu_q=cu_q, used_k=used, max_q=N, scale=sc, causal=bool(is_causal),
             table=table, num_splits=1)
    return lay.untokens(out, B, N)


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None, is_causal=True,
           scale=None, return_lse=False, out=None, lse_out=None):
    """attnum's decode protocol -> ``unified_attention`` (N queries per sequence, pages as they come)."""
    if return_lse:
        raise NotImplementedError("vllm unified_attention returns no LSE")
    _check(q, v_cache)
    B, H, N, d = q.shape
    lens = lay.lengths(cache_seqlens)
    if block_table is None:
        k_cache, v_cache, block_table = lay.pages_of(k_cache, v_cache, lens, PAGE)
    dev = q.device
    cu_q = torch.arange(0, (B + 1) * N, N, dtype=torch.int32, device=dev)
    used = torch.tensor(lens, dtype=torch.int32, device=dev)
    buf = lay.token_out(out, q)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    _unified(lay.tokens(q), k_cache.contiguous(), v_cache.contiguous(), buf, cu_q=cu_q, used_k=used, max_q=N, scale=sc,
             causal=bool(is_causal), table=block_table.to(torch.int32).contiguous(), num_splits=num_splits)
    return lay.written(out, buf, B, N)


def varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
           scale=None):
    """attnum's varlen protocol -> ``unified_attention``: ``cu_seqlens_q`` as given, each sequence's packed keys
    cut into pages of 16 (``seqused_k`` = its key count), its queries the last of its keys (bottom-right)."""
    _check(q, v)
    spans = lay.varlen_spans(cu_seqlens_q, cu_seqlens_k)
    kc, vc, lens = lay.padded_cache(k, v, spans)
    kp, vp, table = lay.pages_of(kc, vc, lens, PAGE)
    dev = q.device
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype, device=dev)
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    _unified(q.contiguous(), kp, vp, out, cu_q=cu_seqlens_q.to(device=dev, dtype=torch.int32),
             used_k=torch.tensor(lens, dtype=torch.int32, device=dev),
             max_q=max([1] + [q1 - q0 for q0, q1, _, _ in spans]), scale=sc, causal=bool(is_causal), table=table,
             num_splits=1)
    return out


def merge_state(o_a, lse_a, o_b, lse_b, out=None, lse_out=None):
    """``merge_attn_states(output, prefix_o, prefix_lse (H, T), suffix_o, suffix_lse, output_lse)``; the
    LSEs pass as transposed views (the kernel reads their strides)."""
    out = torch.empty_like(o_a) if out is None else out
    lse_out = torch.empty_like(lse_a) if lse_out is None else lse_out
    _mod("triton_merge_attn_states").merge_attn_states(out, o_a.contiguous(), lse_a.contiguous().T, o_b.contiguous(),
                                                       lse_b.contiguous().T, lse_out.T)
    return out, lse_out


def triton_decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
                  is_causal=True, scale=None, return_lse=False, out=None, lse_out=None, mla=False):
    """attnum's decode protocol -> ``decode_attention_fwd`` (N = 1); ``mla``: its MLA path (below)."""
    B, H, N, d = q.shape
    if N != 1:
        raise NotImplementedError("vllm decode_attention_fwd: one query per sequence")
    lens = lay.lengths(cache_seqlens)
    if block_table is None:
        k_cache, v_cache, block_table = lay.pages_of(k_cache, v_cache, lens, PAGE)
    dv, dev = v_cache.shape[-1], q.device
    o = out[:, :, 0, :] if out is not None else torch.empty(B, H, dv, dtype=q.dtype, device=dev)
    lse = lse_out[:, :, 0] if lse_out is not None else torch.empty(B, H, dtype=torch.float32, device=dev)
    logits = torch.empty(B, H, num_splits, dv + 1, dtype=torch.float32, device=dev)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    args = (q[:, :, 0].contiguous(), k_cache.contiguous(), v_cache.contiguous(), o, lse,
            block_table.to(torch.int32).contiguous(), torch.tensor(lens, dtype=torch.int32, device=dev), logits,
            num_splits, sc)
    # is_mla as vLLM's Triton MLA backend passes it: decode_attention_fwd itself picks the grouped kernel
    # for H / G > 1 (every real MLA call: one latent head) and the MHA kernel for H == G
    _mod("triton_decode_attention").decode_attention_fwd(*args, page_size=k_cache.shape[1], is_mla=mla)
    o4 = out if out is not None else o.unsqueeze(2)
    return (o4, lse_out if lse_out is not None else lse.unsqueeze(2)) if return_lse else o4


UNIFIED = ServingTarget("vllm-unified", sdpa=sdpa, decode=decode, varlen=varlen, lse_base="e",
                        causal_alignment="bottom_right",
                        accepts_out=True, split_rule="power-of-two")
MERGE = ServingTarget("vllm-triton-merge", merge_state=merge_state, lse_base="e", accepts_out=True)
TRITON_DECODE = ServingTarget("vllm-triton-decode", decode=triton_decode, lse_base="e", single_query_only=True,
                              accepts_out=True, split_rule="fixed-splits")


def mla_decode(q, k_cache, v_cache, **kw):
    """vLLM's MLA decode (``decode_attention_fwd(..., is_mla=True)``, as its Triton MLA backend calls it;
    the grouped kernel whenever H / G > 1): k_cache holds the latent and rope dims (d = dv + r), v_cache the latent (dv), one KV head in
    a real model; the kernel splits the score into a BLOCK_DMODEL and a BLOCK_DPE dot product (512 + 64
    for d = 576, 256 + 32 for d = 288, else next powers of two of dv and d - dv) and, with ``is_mla``, takes
    V from the loaded latent, never from v_cache: a v_cache that is not k_cache[..., :dv] is refused."""
    dv = v_cache.shape[-1]
    latent = k_cache[..., :dv].contiguous()
    ints = {2: torch.int16, 4: torch.int32, 1: torch.int8}[latent.element_size()]  # bits: a NaN pad is equal
    if v_cache.shape != latent.shape or v_cache.dtype != latent.dtype or \
            not torch.equal(v_cache.contiguous().view(ints), latent.view(ints)):
        raise NotImplementedError("vLLM's MLA decode reads the values from the latent (v = k[..., :dv]; its "
                                  "kernel never loads V with is_mla): a separate V cache is not supported")
    return triton_decode(q, k_cache, v_cache, mla=True, **kw)


MLA_DECODE = ServingTarget("vllm-mla-decode", decode=mla_decode, lse_base="e", single_query_only=True,
                           accepts_out=True, split_rule="fixed-splits", features=("mla",))
