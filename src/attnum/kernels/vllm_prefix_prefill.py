"""``vllm-prefix-prefill``: vLLM's ``prefix_prefill.context_attention_fwd`` (``vllm.v1.attention.ops``).

Chunked prefill over a cached prefix: each sequence's first ``L - N`` tokens (its context) are read from
the paged cache in vLLM's older layout -- K ``[num_blocks, G, d / x, block_size, x]``, V
``[num_blocks, G, d, block_size]``, x = 16 bytes / element size -- through ``b_loc`` (the block table);
its last N tokens (the new chunk) come as dense ``k``/``v`` tokens beside the queries
(``b_start_loc``: cumulative query lengths, ``b_seq_len``: L). The queries are the last N positions
(bottom-right causal; ``is_causal=False`` makes the chunk bidirectional, the context stays visible).
Its context loop runs in 32-token tiles (``TRITON_BLOCK_SIZE``), the chunk in 128 x 64; it divides by
``l + 1e-10`` (a row with no key would come out 0, a finite sentinel) and returns no LSE. Its
``tl.dot`` takes Triton's default ``input_precision`` (TF32 on sm80+ for fp32; IEEE only on Turing).

Entry points: SDPA (S - N context tokens, paged here in blocks of 16, then the last N dense; S >= N) and
decode (the protocol's cache, contiguous or a page pool (n, P, G, d), relaid into vLLM's layout whole --
every page, NaN pages included -- with the protocol's block table; L >= N per sequence). From the
installed ``vllm`` or the pinned wheel (``attnum kernels fetch vllm``); on CPU through the interpreter.
"""

from __future__ import annotations

import math

import torch

from attnum.kernels import serving_layout as lay
from attnum.kernels import wheels
from attnum.kernels.serving import ServingTarget

PACKAGE = "vllm"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MODULE = "vllm.v1.attention.ops.prefix_prefill"
PAGE = 16


def vllm_cache_layout(k_pool, v_pool):
    """(n, P, G, d) pages -> K (n, G, d / x, P, x), V (n, G, d, P), x = 16 // element size (vLLM's)."""
    n, P, G, d = k_pool.shape
    x = 16 // k_pool.element_size()
    if d % x:
        raise NotImplementedError(f"vllm prefix_prefill: head dim {d} is not a multiple of x = {x}")
    k = k_pool.reshape(n, P, G, d // x, x).permute(0, 2, 3, 1, 4).contiguous()
    return k, v_pool.permute(0, 2, 3, 1).contiguous()


def _chunk(pool, table, lens, N):
    """The last N tokens of each sequence, (B N, G, d), read through the block table."""
    P = pool.shape[1]
    rows = [pool[table[b][j // P], j % P] for b, L in enumerate(lens) for j in range(L - N, L)]
    return torch.stack(rows).contiguous()


def _run(q_tok, k_pool, v_pool, table, lens, N, *, scale, causal, out_tok):
    """The kernel on B sequences of N queries; ``lens`` = L per sequence (L >= N)."""
    dev, d = q_tok.device, q_tok.shape[-1]
    if any(L < N for L in lens) or N == 0:
        raise NotImplementedError("vllm prefix_prefill: the N >= 1 queries are the last N of each sequence's L keys")
    tab = table.tolist()
    k_tok, v_tok = _chunk(k_pool, tab, lens, N), _chunk(v_pool, tab, lens, N)
    k_cache, v_cache = vllm_cache_layout(k_pool, v_pool)
    one = torch.ones((), dtype=torch.float32, device=dev)
    B = len(lens)
    wheels.load(PACKAGE, MODULE).context_attention_fwd(
        q_tok, k_tok, v_tok, out_tok, "auto", k_cache, v_cache, table.to(torch.int32).contiguous(),
        torch.arange(0, (B + 1) * N, N, dtype=torch.int32, device=dev),
        torch.tensor(lens, dtype=torch.int32, device=dev), max(lens), N, one, one,
        sm_scale=1.0 / math.sqrt(d) if scale is None else float(scale), causal=bool(causal))
    return out_tok


def _check(q, k, v):
    if k.shape[-1] != q.shape[-1] or v.shape[-1] != q.shape[-1]:
        raise NotImplementedError("vllm prefix_prefill: head dims of Q, K, V equal only")


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Prefill: B sequences of N queries, the last N of S positions; the first S - N are cached context."""
    lay.refuse_sdpa_extras("vllm prefix_prefill", query, key, attn_mask, enable_gqa)
    B, H, N, _ = query.shape
    _check(query, key, value)
    S = key.shape[2]
    kp, vp, table = lay.pages_of(key, value, [S] * B, PAGE)
    out = torch.empty(B * N, H, query.shape[-1], dtype=query.dtype, device=query.device)
    _run(lay.tokens(query), kp, vp, table, [S] * B, N, scale=scale, causal=is_causal, out_tok=out)
    return lay.untokens(out, B, N).contiguous()


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None, is_causal=True,
           scale=None, return_lse=False, out=None, lse_out=None):
    """attnum's decode protocol -> ``context_attention_fwd`` (N queries = the last N of each sequence)."""
    if return_lse:
        raise NotImplementedError("vllm prefix_prefill returns no LSE")
    _check(q, k_cache, v_cache)
    B, H, N, d = q.shape
    lens = lay.lengths(cache_seqlens)
    if block_table is None:
        k_cache, v_cache, block_table = lay.pages_of(k_cache, v_cache, lens, PAGE)
    buf = lay.token_out(out, q)
    _run(lay.tokens(q), k_cache, v_cache, block_table, lens, N, scale=scale, causal=is_causal, out_tok=buf)
    return lay.written(out, buf, B, N)


PREFIX_PREFILL = ServingTarget("vllm-prefix-prefill", sdpa=sdpa, decode=decode, lse_base="e",
                               causal_alignment="bottom_right", empty_rows="zeros", accepts_out=True,
                               split_rule="fixed-size")
"""``empty_rows="zeros"``: what ``acc / (l + 1e-10)`` gives a row with no key (acc = l = 0); no case the
adapter accepts has one (L >= N gives every query its own key)."""
