"""Layout helpers the SGLang / vLLM adapters share: attnum's decode protocol (q (B, H, N, d), a contiguous
cache (B, G, S, d) or a page pool (n_pages, P, G, d) with a block table) to token pools and pages."""

from __future__ import annotations

import torch


def refuse_sdpa_extras(kernel: str, query, key, attn_mask, enable_gqa) -> None:
    """What none of the SGLang / vLLM prefill kernels take through SDPA: a mask, or G != H without
    ``enable_gqa`` (raised as NotImplementedError: the audit reads it as ``unsupported``)."""
    if attn_mask is not None:
        raise NotImplementedError(f"{kernel}: no attn_mask")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise NotImplementedError(f"{kernel}: G != H needs enable_gqa")


def lengths(cache_seqlens) -> list[int]:
    return [int(x) for x in torch.as_tensor(cache_seqlens).tolist()]


def token_pool(k_cache, v_cache, lens, block_table=None):
    """(k (T, G, d), v (T, G, dv), kv_indptr (B + 1,) int32, kv_indices int32): SGLang's token-pool
    view of the cache; with pages the indices follow the block table."""
    dev = k_cache.device
    if block_table is None:
        B, G, S, d = k_cache.shape
        k = k_cache.permute(0, 2, 1, 3).reshape(B * S, G, d)
        v = v_cache.permute(0, 2, 1, 3).reshape(B * S, G, v_cache.shape[-1])
        idx = [b * S + j for b, L in enumerate(lens) for j in range(L)]
    else:
        n, P, G, d = k_cache.shape
        k, v = k_cache.reshape(n * P, G, d), v_cache.reshape(n * P, G, v_cache.shape[-1])
        table = block_table.tolist()
        idx = [table[b][j // P] * P + j % P for b, L in enumerate(lens) for j in range(L)]
    indptr = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    indices = torch.tensor(idx or [0], dtype=torch.int32, device=dev)
    return k.contiguous(), v.contiguous(), indptr, indices


def pages_of(k_cache, v_cache, lens, page: int = 16):
    """(k_pages, v_pages (n, P, G, d), block_table (B, ceil(S / P)) int32) from a contiguous cache,
    pages in order (sequence b owns pages b * m ... b * m + m - 1); slots past S hold 0."""
    B, G, S, d = k_cache.shape
    m = max(1, -(-S // page))
    pad = m * page - S

    def paged(x):
        x = torch.nn.functional.pad(x, (0, 0, 0, pad)) if pad else x  # (B, G, m * P, d)
        return x.reshape(B, G, m, page, x.shape[-1]).permute(0, 2, 3, 1, 4).reshape(B * m, page, G, x.shape[-1])

    table = torch.arange(B * m, dtype=torch.int32, device=k_cache.device).reshape(B, m)
    return paged(k_cache).contiguous(), paged(v_cache).contiguous(), table
