"""``flashinfer-decode``: FlashInfer's ``single_decode_with_kv_cache`` and paged ``BatchDecodeWithPagedKVCacheWrapper``.

Protocol (:mod:`attnum.kernels.serving`) to FlashInfer: q (B, H, 1, d) -> per sequence (H, d); a
contiguous cache (B, G, S, d) -> (L_b, G, d) "NHD" per sequence (single decode); a page pool
(n_pages, P, G, d) with a block table -> FlashInfer's CSR page list (``kv_indptr``, ``kv_indices``,
``kv_last_page_len``) for one ``plan`` + ``run``. Decode is one query per sequence (N = 1, which sees the
whole cache: causal is moot); N > 1 is unsupported. FlashInfer picks its own split-KV factor, so
``num_splits`` and ``max_seqlen`` are not passed (the split-invariance probe then sees its own choice).
LSEs are base 2; empty rows (0, -inf) after flashinfer#4401 (the -5e4 sentinel of flashinfer#4450 lived
in this decode path).
"""

from __future__ import annotations

import math

import torch

from attnum.kernels.serving import ServingTarget

NAME = "flashinfer-decode"
PACKAGE = "flashinfer"
DEVICES = ("cuda",)
DTYPES = (torch.bfloat16, torch.float16)
WORKSPACE_BYTES = 128 * 1024 * 1024


def _csr(block_table, lens, P, device):
    indptr, indices, last = [0], [], []
    for b, L in enumerate(lens):
        n = math.ceil(L / P)
        indices += block_table[b, :n].tolist()
        indptr.append(indptr[-1] + n)
        last.append(L - (n - 1) * P if n else 0)
    as_i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=device)  # noqa: E731
    return as_i32(indptr), as_i32(indices), as_i32(last)


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
           is_causal=True, scale=None, return_lse=False):
    import flashinfer

    B, H, N, d = q.shape
    if N != 1:
        raise NotImplementedError("flashinfer decode takes one query per sequence (N = 1)")
    if q.dtype not in DTYPES:
        raise NotImplementedError(f"flashinfer decode supports fp16/bf16, not {q.dtype}")
    lens = [int(x) for x in cache_seqlens.tolist()]
    if block_table is None:
        outs, lses = [], []
        for b, L in enumerate(lens):
            if L == 0:
                outs.append(torch.zeros(H, v_cache.shape[-1], dtype=q.dtype, device=q.device))
                lses.append(torch.full((H,), -math.inf, device=q.device))
                continue
            o, lse = flashinfer.single_decode_with_kv_cache(
                q[b, :, 0].contiguous(), k_cache[b, :, :L].transpose(0, 1).contiguous(),
                v_cache[b, :, :L].transpose(0, 1).contiguous(), kv_layout="NHD", sm_scale=scale, return_lse=True)
            outs.append(o)
            lses.append(lse)
        o, lse = torch.stack(outs)[:, :, None], torch.stack(lses)[:, :, None]
    else:
        P, G = k_cache.shape[1], k_cache.shape[2]
        indptr, indices, last = _csr(block_table.cpu(), lens, P, q.device)
        ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, kv_layout="NHD")
        wrapper.plan(indptr, indices, last, H, G, d, P, data_type=k_cache.dtype, q_data_type=q.dtype,
                     sm_scale=scale)
        o, lse = wrapper.run(q[:, :, 0].contiguous(), (k_cache, v_cache), return_lse=True)
        o, lse = o[:, :, None], lse[:, :, None]
    return (o, lse) if return_lse else o


sdpa = ServingTarget(NAME, decode=decode, lse_base=2)
