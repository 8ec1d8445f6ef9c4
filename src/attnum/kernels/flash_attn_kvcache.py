"""``flash-attn-kvcache``: Dao-AILab's ``flash_attn_with_kvcache`` (split-KV ``num_splits``, paged ``block_table``).

Protocol (:mod:`attnum.kernels.serving`) to flash-attn: q (B, H, N, d) -> (B, N, H, d); a contiguous
cache (B, G, S, d) -> (B, S, G, d); a page pool (n_pages, P, G, d) and block table go as they are
(flash-attn's layout; FA2 needs P % 256 == 0, else unsupported). The host ``max_seqlen`` is the cache's
S (contiguous: the cache is zero-padded to it) or the block table's width x P (paged: padded with page
0), which is how flash-attn sees it. ``causal=True`` is bottom-right. LSEs are natural; FA2 writes +inf
for rows with no key in its non-split path and -inf in split partials (Dao-AILab/flash-attention#978),
so the adapter declares the -inf a merge expects and the inf-lse-empty-rows probe reports the rest.
SDPA calls go to ``flash_attn_func`` (:mod:`attnum.kernels.flash_attn`).
"""

from __future__ import annotations

import math

import torch

from attnum.kernels import flash_attn
from attnum.kernels.serving import ServingTarget

NAME = "flash-attn-kvcache"
PACKAGE = "flash_attn"
DEVICES = ("cuda",)
DTYPES = (torch.bfloat16, torch.float16)
PAGE_MULTIPLE = 256  # FA2's paged-KV requirement (csrc/flash_attn/flash_api.cpp)


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=0, max_seqlen=None,
           is_causal=True, scale=None, return_lse=False):
    """``num_splits`` left out: 0, flash-attn's own ``num_splits_heuristic`` (its default), which is what
    the decode-batch-invariance probe asks for; the probes that pass a count get that count."""
    from flash_attn import flash_attn_with_kvcache

    if q.dtype not in DTYPES:
        raise NotImplementedError(f"flash_attn_with_kvcache supports fp16/bf16, not {q.dtype}")
    seqlens = cache_seqlens.to(device=q.device, dtype=torch.int32)
    if block_table is None:
        k, v = k_cache.transpose(1, 2), v_cache.transpose(1, 2)  # (B, S, G, d)
        if max_seqlen is not None and max_seqlen > k.shape[1]:
            pad = max_seqlen - k.shape[1]
            k = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pad))
            v = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pad))
        table = None
    else:
        P = k_cache.shape[1]
        if P % PAGE_MULTIPLE:
            raise NotImplementedError(f"flash-attn's paged KV needs a page size divisible by {PAGE_MULTIPLE}, not {P}")
        k, v, table = k_cache, v_cache, block_table.to(device=q.device, dtype=torch.int32)
        if max_seqlen is not None and math.ceil(max_seqlen / P) > table.shape[1]:
            extra = math.ceil(max_seqlen / P) - table.shape[1]
            table = torch.nn.functional.pad(table, (0, extra))
    out = flash_attn_with_kvcache(q.transpose(1, 2).contiguous(), k.contiguous(), v.contiguous(),
                                  cache_seqlens=seqlens, block_table=table, softmax_scale=scale, causal=is_causal,
                                  num_splits=num_splits, return_softmax_lse=return_lse)
    if return_lse:
        o, lse = out
        return o.transpose(1, 2), lse
    return out.transpose(1, 2)


sdpa = ServingTarget(NAME, sdpa=flash_attn.sdpa, decode=decode, lse_base="e")
