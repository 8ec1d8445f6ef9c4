"""A few KV-cache entries beyond the FP8 format's range must not turn the output into NaN or clamp it.

Models vLLM's FP8 KV cache with its default fixed scale (vllm-project/vllm
docs/features/quantization/quantized_kvcache.md:
``kv_cache_dtype`` fp8 / fp8_e4m3 / fp8_e5m2, per-tensor ``k_scale = v_scale = 1.0`` unless calibrated --
"quantization error can degrade output quality"). With scale 1.0 a key or value above e4m3fn's max (448)
after scaling has no FP8 code: the non-saturating e4m3fn cast gives NaN, a saturating one clamps it to 448,
and neither is reported. Outlier channels of that size are ordinary in K and V. A calibrated scale
(amax / 448, attnum.attention.quant) keeps them in range. The cache here is N(0, 1) except a few entries of
magnitude 600 and 1e4 (representable in bf16, fp16 and fp32) at a few positions, in K, in V and in both,
contiguous and paged (P = 16, two splits), N = 1 and N = 4, padding zero (the padding probes own NaN there); judged against the float64 golden on the
audited-dtype inputs (a NaN or inf output where the golden is finite fails outright).
"""

from __future__ import annotations

from attnum.attention.paged import to_pages
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, missing

# (magnitude, position as a fraction of L, channel): e4m3fn's max is 448, so every one overflows scale 1.0
OUTLIERS = ((600.0, 0.0, 3), (1.0e4, 0.5, 17), (-600.0, 0.75, 40), (-1.0e4, 1.0, 61))


def _plant(x, lens, which):
    """The outliers in x (B, G, S, d), in place, at positions of each sequence's first L slots."""
    for b, L in enumerate(lens):
        if L == 0:
            continue
        for mag, frac, ch in OUTLIERS:
            pos = min(L - 1, int(frac * (L - 1)))
            x[b, b % x.shape[1], pos, (ch + which) % x.shape[-1]] = mag


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    cases = []
    for N, lens, salt in ((1, (64, 37, 5), 701), (4, (48, 16, 9), 709)):
        q, k, v, lens_t = decode_inputs(ctx, B=len(lens), H=4, G=2, N=N, S=64, d=64, lens=lens, salt=salt)
        for where in ("K", "V", "K and V"):
            kk, vv = k.double().clone(), v.double().clone()
            if "K" in where:
                _plant(kk, lens, 0)
            if "V" in where:
                _plant(vv, lens, 1)
            kk, vv = ctx.cast(kk, vv)
            cases.append(decode_case(ctx, f"N={N} L={lens}: |x| = 600, 1e4 in {where}", q, kk, vv,
                                     cache_seqlens=lens_t))
            if where == "K and V":
                kp, table = to_pages(kk, 16, cache_seqlens=lens_t, fill=0.0, seed=salt)
                vp, _ = to_pages(vv, 16, cache_seqlens=lens_t, fill=0.0, seed=salt)
                cases.append(decode_case(ctx, f"N={N} L={lens}: paged P=16 splits=2, |x| = 600, 1e4 in K and V",
                                         q, kk, vv, cache_seqlens=lens_t, block_table=table, pages=(kp, vp),
                                         num_splits=2))
    return cases


PROBE = Probe(
    name="kv-scale-overflow",
    summary="K/V entries of 600 and 1e4 (beyond e4m3's 448 at vLLM's fixed kv_scale 1.0) at a few cache slots",
    refs=("vllm-project/vllm docs/features/quantization/quantized_kvcache.md (FP8 KV cache, default kv scale 1.0)",),
    run=run,
)
