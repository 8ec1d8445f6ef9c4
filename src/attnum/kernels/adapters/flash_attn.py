"""flash-attn (Dao-AILab/flash-attention): ``flash_attn_func``, ``flash_attn_varlen_func`` and
``flash_attn_with_kvcache`` of the installed package (CUDA).

- ``flash-attn`` -- ``flash_attn_func`` behind the SDPA signature. Layout: flash-attn takes (B, N, H, d); SDPA
  passes (B, H, N, d), so tensors are transposed in and out. GQA is native (fewer kv heads). There is no
  arbitrary mask argument, so an ``attn_mask`` is unsupported (not an error), as are fp32 inputs. ``varlen``
  is the serving protocol's variable-length entry point through ``flash_attn_varlen_func`` (the varlen-ragged
  probe).
- ``flash-attn-kvcache`` -- ``flash_attn_with_kvcache`` (split-KV ``num_splits``, paged ``block_table``).
  Protocol (:mod:`attnum.kernels.serving`) to flash-attn: q (B, H, N, d) -> (B, N, H, d); a contiguous cache
  (B, G, S, d) -> (B, S, G, d); a page pool (n_pages, P, G, d) and block table go as they are (flash-attn's
  layout; FA2 needs P % 256 == 0, else unsupported). The host ``max_seqlen`` is the cache's S (contiguous: the
  cache is zero-padded to it) or the block table's width x P (paged: padded with page 0), which is how
  flash-attn sees it. LSEs are natural; FA2 writes +inf for rows with no key in its non-split path and -inf in
  split partials (Dao-AILab/flash-attention#978), so the adapter declares the -inf a merge expects and the
  inf-lse-empty-rows probe reports the rest. SDPA calls go to ``flash_attn_func``.

Conventions (both declared): ``causal=True`` is bottom-right aligned since flash-attn 2.1 (the causal-alignment
probe reports that rather than failing it), and a row with no key is 0 (flash-attn#1778 "the top of the output
will be zero").
"""

from __future__ import annotations

import math

import torch

from attnum.kernels.protocol import sdpa_kernel
from attnum.kernels.serving import ServingTarget

PACKAGE = "flash_attn"
DTYPES = (torch.bfloat16, torch.float16)


# -- flash_attn_func, flash_attn_varlen_func ---------------------------------------------------------------

def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from flash_attn import flash_attn_func

    if attn_mask is not None:
        raise NotImplementedError("flash_attn_func takes no attn_mask")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flash_attn_func supports fp16/bf16, not {query.dtype}")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise ValueError("kv heads differ from query heads but enable_gqa=False")
    out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                          dropout_p=dropout_p, softmax_scale=scale, causal=is_causal)
    return out.transpose(1, 2)


def varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
           scale=None):
    """attnum's varlen protocol -> ``flash_attn_varlen_func`` (the same packed layout: q (Tq, H, d), k, v
    (Tk, G, d), int32 cumulative lengths; causal bottom-right; a row with no key gives zeros)."""
    from flash_attn import flash_attn_varlen_func

    if q.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flash_attn_varlen_func supports fp16/bf16, not {q.dtype}")
    lens_q, lens_k = (c[1:] - c[:-1] for c in (cu_seqlens_q, cu_seqlens_k))
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q.to(torch.int32), cu_seqlens_k.to(torch.int32),
                                  int(max_seqlen_q if max_seqlen_q is not None else lens_q.max()),
                                  int(max_seqlen_k if max_seqlen_k is not None else lens_k.max()),
                                  softmax_scale=scale, causal=is_causal)


sdpa.varlen = varlen  # the serving protocol's varlen entry point (attnum.kernels.serving)


# -- flash_attn_with_kvcache ---------------------------------------------------------------------------

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


KVCACHE = ServingTarget("flash-attn-kvcache", sdpa=sdpa, decode=decode, lse_base="e")


KERNELS = (
    sdpa_kernel("flash-attn", sdpa, package=PACKAGE, devices=("cuda",), dtypes=DTYPES,
                doc="``flash-attn``: Dao-AILab's ``flash_attn_func`` behind the SDPA signature.",
                causal_alignment="bottom_right", empty_rows="zeros"),
    sdpa_kernel("flash-attn-kvcache", KVCACHE, package=PACKAGE, devices=("cuda",), dtypes=DTYPES,
                doc="``flash-attn-kvcache``: Dao-AILab's ``flash_attn_with_kvcache`` (split-KV ``num_splits``, "
                    "paged ``block_table``).", causal_alignment="bottom_right", empty_rows="zeros"),
)
