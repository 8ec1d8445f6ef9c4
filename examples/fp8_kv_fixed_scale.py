"""A decode kernel with an FP8 (e4m3fn) KV cache at vLLM's default fixed scale 1.0: outliers become NaN.

BUGGY ON PURPOSE - an audit target for ``attnum audit examples/fp8_kv_fixed_scale.py:target``.

vLLM's FP8 KV cache (docs/features/quantization/quantized_kvcache.md) uses ``k_scale = v_scale = 1.0``
unless calibrated. Every K and V entry is divided by that scale and cast to e4m3fn, whose largest value is
448 and which has no infinity: an entry above ~464 has no code and the non-saturating cast gives NaN,
silently. The cache here goes through attnum.attention.lowbit.quant (``kv_cache_quantization("fp8", 1.0)``,
``quantize_kv_cache``) before attention, and every entry the quantizer sends out of range is NaN in the
cache the kernel attends over. The attention itself is attnum's decode (``decode:fa2``: bottom-right causal,
pages, natural LSE) in one pass (split counts are ignored, so the output is split-invariant bit for bit),
so only the overflow is wrong.

In-range entries take their e4m3fn value (3 mantissa bits): the target declares its cache
(``kv_cache_dtype``, ``k_scale``, ``v_scale``), so every decode probe judges the attention on the values the
cache holds and only the overflow is wrong -- the part no tolerance excuses, and the part a fixed scale adds.
"""

from __future__ import annotations

from attnum.attention.lowbit.quant import kv_cache_quantization, quantize_kv_cache
from attnum.kernels.serving import ServingTarget, reference

KV_CACHE = kv_cache_quantization("fp8", 1.0)  # e4m3fn, one scale per tensor, fixed at vLLM's default 1.0
_ATTEND = reference("fa2").decode


def _fp8_cache(k_cache, v_cache):
    """The cache after the FP8 store, read back in the cache's dtype: each entry's e4m3fn value, NaN wherever
    e4m3fn at scale 1.0 has no code for it (the non-saturating cast: the silent overflow)."""
    kv = quantize_kv_cache(k_cache, v_cache, KV_CACHE)  # k, v: (B, G, S, d) or a page pool, 4-D either way
    return [qx.dequantize().to(device=x.device, dtype=x.dtype) for x, qx in ((k_cache, kv.k), (v_cache, kv.v))]


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
           is_causal=True, scale=None, return_lse=False):
    """q (B, H, N, d); cache (B, G, S, d) or pages (n_pages, P, G, d) with a block table; one pass."""
    k8, v8 = _fp8_cache(k_cache, v_cache)
    return _ATTEND(q, k8, v8, cache_seqlens=cache_seqlens, block_table=block_table, num_splits=1,
                   max_seqlen=max_seqlen, is_causal=is_causal, scale=scale, return_lse=return_lse)


target = ServingTarget("fp8-kv-fixed-scale", decode=decode, kv_cache_dtype="e4m3fn", k_scale=1.0, v_scale=1.0)
