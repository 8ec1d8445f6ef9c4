"""A few KV-cache entries beyond the FP8 format's range must not turn the output into NaN or clamp it.

Models vLLM's FP8 KV cache with its default fixed scale (vllm-project/vllm
docs/features/quantization/quantized_kvcache.md:
``kv_cache_dtype`` fp8 / fp8_e4m3 / fp8_e5m2, per-tensor ``k_scale = v_scale = 1.0`` unless calibrated --
"quantization error can degrade output quality"). With scale 1.0 a key or value above e4m3fn's max (448)
after scaling has no FP8 code: the non-saturating e4m3fn cast gives NaN, a saturating one clamps it to 448,
and neither is reported. Outlier channels of that size are ordinary in K and V. A calibrated scale
(amax / 448, attnum.attention.lowbit.quant) keeps them in range. The cache here is N(0, 1) except a few entries of
magnitude 600 and 1e4 (representable in bf16, fp16 and fp32) at a few positions, in K, in V and in both,
contiguous and paged (P = 16, two splits), N = 1 and N = 4, padding zero (the padding probes own NaN
there); judged against the float64 golden on the audited-dtype inputs (a NaN or inf output where the
golden is finite fails outright).

The target must declare its cache (attnum.kernels.serving: ``kv_cache_dtype`` = e4m3fn / e5m2,
``k_scale``, ``v_scale``); without that there is nothing to overflow and the probe is ``unsupported``.
The outliers are 1.34x and 22x the largest value the declared cache holds (format max x scale), where the
audited dtype can hold them. The baseline attends to the cache quantised as a careful writer would: every
in-range entry rounded to the format at its scale, the outliers kept -- so the bound allows FP8's rounding
of ordinary entries, not a clamp or a NaN of the outliers.
"""

from __future__ import annotations

import torch

from attnum.attention.serving.paged import to_pages
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, missing, unsupported
from attnum.numerics.formats import get_format
from attnum.numerics.rounding import round_to

# (factor of the cache's largest value, position as a fraction of L, channel)
OUTLIERS = ((1.34, 0.0, 3), (22.0, 0.5, 17), (-1.34, 0.75, 40), (-22.0, 1.0, 61))


def _plant(x, lens, which, top: float, limit: float) -> int:
    """The outliers (factor x ``top``) in x (B, G, S, d), in place, in each sequence's first L slots;
    those beyond ``limit`` (the audited dtype's max) are left out. Returns how many were planted."""
    n = 0
    for b, L in enumerate(lens):
        if L == 0:
            continue
        for factor, frac, ch in OUTLIERS:
            if abs(factor) * top > limit:
                continue
            pos = min(L - 1, int(frac * (L - 1)))
            x[b, b % x.shape[1], pos, (ch + which) % x.shape[-1]] = factor * top
            n += 1
    return n


def quantised(x: torch.Tensor, fmt, scale: float) -> torch.Tensor:
    """x with every entry the cache can hold (|x| / scale <= max) rounded to ``fmt`` at ``scale``."""
    xd = x.double()
    inside = (xd / scale).abs() <= fmt.max
    return torch.where(inside, round_to(xd / scale, fmt) * scale, xd)


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    kv = getattr(ctx.target, "kv_cache_dtype", None)
    if kv is None:
        return [unsupported("kv-cache", "the target declares no FP8 KV cache (kv_cache_dtype, k_scale, v_scale: "
                                        "attnum.kernels.serving); nothing here can overflow it")]
    fmt = get_format(kv)
    scales = (float(getattr(ctx.target, "k_scale", 1.0)), float(getattr(ctx.target, "v_scale", 1.0)))
    cases = []
    for N, lens, salt in ((1, (64, 37, 5), 701), (4, (48, 16, 9), 709)):
        q, k, v, lens_t = decode_inputs(ctx, B=len(lens), H=4, G=2, N=N, S=64, d=64, lens=lens, salt=salt)
        for where in ("K", "V", "K and V"):
            kk, vv = k.double().clone(), v.double().clone()
            planted = 0
            if "K" in where:
                planted += _plant(kk, lens, 0, fmt.max * scales[0], ctx.fmt.max)
            if "V" in where:
                planted += _plant(vv, lens, 1, fmt.max * scales[1], ctx.fmt.max)
            label = f"N={N} L={lens}: {fmt.name} cache, outliers in {where}"
            if not planted:
                cases.append(unsupported(label, f"{ctx.fmt.name} cannot hold a value beyond {fmt.name}'s range at "
                                                f"scales {scales}"))
                continue
            kk, vv = ctx.cast(kk, vv)
            base = (quantised(kk, fmt, scales[0]), quantised(vv, fmt, scales[1]))
            cases.append(decode_case(ctx, label, q, kk, vv, cache_seqlens=lens_t, baseline_kv=base))
            if where == "K and V":
                kp, table = to_pages(kk, 16, cache_seqlens=lens_t, fill=0.0, seed=salt)
                vp, _ = to_pages(vv, 16, cache_seqlens=lens_t, fill=0.0, seed=salt)
                cases.append(decode_case(ctx, f"{label}, paged P=16 splits=2", q, kk, vv, cache_seqlens=lens_t,
                                         block_table=table, pages=(kp, vp), num_splits=2, baseline_kv=base))
    return cases


PROBE = Probe(
    name="kv-scale-overflow",
    summary="K/V entries 1.34x and 22x beyond the declared FP8 KV cache's range at its declared scales",
    refs=("vllm-project/vllm docs/features/quantization/quantized_kvcache.md (FP8 KV cache, default kv scale 1.0)",),
    run=run,
)
