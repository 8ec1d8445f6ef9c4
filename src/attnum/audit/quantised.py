"""What a kernel computes with when its serving path quantises the inputs: an FP8 KV cache and FP8 queries.

A target may declare (attnum.kernels.serving) that K and V reach its kernel through an FP8 cache
(``kv_cache_dtype`` e4m3fn / e5m2 at per-tensor ``k_scale`` / ``v_scale``) and, with ``q_scale``, that the
queries are quantised to the same format (vLLM's attention layer does both for ``kv_cache_dtype="fp8"`` on
CUDA). The target receives the audited dtype's values and quantises them itself, as the serving stack does;
the kernel then computes with the cache's values, not the inputs. The references must read what the kernel
read, as they read the inputs rounded to the audited dtype: :func:`received` gives them, each declared tensor
stored as the writer stores it (:func:`attnum.attention.lowbit.qformats.per_tensor_fp8`: x / scale clamped
to the format and rounded once) and read back:

- with FP8 queries, Q, K and V are the dequantised values, float64 (an FP8 value times an fp32 scale: exact):
  both GEMMs run on FP8 operands and scale their fp32 results;
- with an FP8 cache only, Q is the input and K, V are the dequantised values rounded once to the audited
  dtype: the kernel dequantises its tiles to the queries' dtype before the dot (vLLM's ``_cast_kv_tile``,
  FlashInfer's and FlashMLA's decode), so that rounding is the kernel's input, not its error.

The quantisation itself (a value clamped to the format's max, the rounding of the scale) is the serving
stack's design, judged by the probe that asks about it (kv-scale-overflow, whose golden reads the inputs as
they were); every other probe judges the kernel's arithmetic on what it received.

The baseline of the verdict rule must be a kernel *of that design*. With FP8 queries both GEMMs run on FP8
operands: the scores are dot(q8, k8) times the descales, and P, the unnormalised exp(s - m) of the online softmax,
is cast to the cache's format for the P V dot (vLLM's ``P.to(V.dtype)``, FlashAttention-3's FP8 forward). A
same-precision plain attention, whose largest rounding is the dtype's, would hold such a kernel to a bound its
design cannot meet; so the baseline (:func:`baseline`) is attnum's tiled flash attention on the quantised values
themselves (Q, K, V on the FP8 grid, the descales folded into the softmax scale and applied to the output, as the
kernel does), P rounded to the cache's format at site ``probs``, the rest as FlashAttention-2 (fp32 scores,
statistics and accumulator, the output in the audited dtype) -- and, when the target runs under a GPU model, both
dots as that GPU's FP8 tensor-core instructions (the policy's ``mma``): FP8 MMAs accumulate with far fewer bits
than fp32 (13 in the sm89 / sm90 models, MMA-Sim's measurement; DeepSeek-V3's report, section 3.3.2, "around 14
bits"), which at scores of a few hundred moves each score by ~0.1, more than P's rounding. Measured on vLLM
0.33.0's kernel under the sm89 model, scaled logits ~1000, N = S = 64: kernel vs float64 0.178, this baseline
0.178, the same baseline with exact fp32 dots 0.020. The baseline scales P by nothing (FA3 and vLLM >= 0.33 shift
P up by 2**8 first to keep small probabilities out of the format's subnormals): it is the straightforward design,
and a kernel that does better passes with more margin. With an FP8 cache only, the ordinary baseline applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.attention.lowbit.qformats import fp32_scale, per_tensor_fp8
from attnum.numerics.formats import FloatFormat
from attnum.numerics.rounding import round_to


@dataclass(frozen=True, kw_only=True)
class Quantised:
    """A target's declared input quantisation: the cache's format and scales, and the queries' scale (None:
    the queries stay in the audited dtype)."""

    fmt: str
    k_scale: float
    v_scale: float
    q_scale: float | None = None

    @property
    def fp8_operands(self) -> bool:
        """Whether both GEMMs run on FP8 operands (the queries are quantised too)."""
        return self.q_scale is not None


def declared(target) -> Quantised | None:
    """The quantisation ``target`` declares (attnum.kernels.serving), or None."""
    fmt = getattr(target, "kv_cache_dtype", None)
    if fmt is None:
        return None
    q_scale = getattr(target, "q_scale", None)
    return Quantised(fmt=str(fmt), k_scale=float(getattr(target, "k_scale", 1.0)),
                     v_scale=float(getattr(target, "v_scale", 1.0)),
                     q_scale=None if q_scale is None else float(q_scale))


def dequantised(x: torch.Tensor, fmt: str, scale: float) -> torch.Tensor:
    """x as the writer stores it and the kernel reads it back (float64, exact)."""
    return per_tensor_fp8(x, fmt, scale) * fp32_scale(scale)


def received(target, fmt: FloatFormat, q, k, v) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) as the kernel of ``target`` computes with them (module docstring); the inputs themselves when
    it declares no quantisation. q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv), or any layout: elementwise."""
    quant = declared(target)
    if quant is None:
        return q, k, v
    k64, v64 = dequantised(k, quant.fmt, quant.k_scale), dequantised(v, quant.fmt, quant.v_scale)
    if quant.fp8_operands:
        return dequantised(q, quant.fmt, quant.q_scale), k64, v64
    return q, round_to(k64, fmt).to(k.dtype), round_to(v64, fmt).to(v.dtype)


def fp8_operands(target) -> bool:
    quant = declared(target)
    return quant is not None and quant.fp8_operands


def baseline_policy(target, fmt: FloatFormat, arch: str | None = None) -> str:
    """The flash policy of the same-design baseline (module docstring) on the quantised values."""
    f = declared(target).fmt
    return f"fa2:{fmt.name},inputs={f},probs={f},out=fp32" + (f",mma={arch}" if arch else "")


def baseline(target, fmt: FloatFormat, q, k, v, *, attn_mask=None, is_causal=False, scale=None,
             causal_alignment: str = "top_left", arch: str | None = None) -> torch.Tensor:
    """The same-design baseline (B, H, N, dv), float64 holding ``fmt`` values, of a target with FP8 operands, on
    the received q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv); ``arch``: the GPU model its dots run on (None:
    exact fp32 accumulation)."""
    from attnum.attention.flash import flash_attention

    quant = declared(target)
    qs, ks, vs = (fp32_scale(s) for s in (quant.q_scale, quant.k_scale, quant.v_scale))
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # the received values divided by their scales are the FP8 values themselves, exactly; anything else (a value
    # the cache cannot hold) would become NaN at the baseline's input rounding and make every bound vacuous
    x8 = [x.double() / s for x, s in ((q, qs), (k, ks), (v, vs))]
    for x in x8:
        fin = torch.isfinite(x)
        if not torch.equal(round_to(x[fin], quant.fmt), x[fin]):
            raise ValueError(f"the FP8 baseline was given values a {quant.fmt} cache does not hold (attnum bug)")
    o = flash_attention(*x8, attn_mask=attn_mask, is_causal=is_causal, scale=sc * qs * ks,
                        policy=baseline_policy(target, fmt, arch), causal_alignment=causal_alignment)
    return round_to(o.double() * vs, fmt)  # site: out (the kernel scales its fp32 accumulator by v_scale)
