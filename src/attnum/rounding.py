"""Rounding real values (carried in float32 or float64 tensors) onto a FloatFormat's grid.

The result is *correctly rounded from the carrier value*: one rounding, from the exact float64
(or float32) input, never through an intermediate format. torch's own float64 -> bf16/fp16/fp8
casts go through float32 and round twice (1 + 2**-8 + 2**-30 becomes 1.0 in bf16, not 1.0078125);
the paths here do not.

Paths:

- generic: ``frexp`` -> exponent clamped at the subnormal boundary -> scale so the format's
  quantum is 1 -> round to an integer (``torch.round`` is ties-to-even) -> scale back -> apply the
  format's overflow rule. Every step but the integer rounding is exact in the carrier.
- native (nearest-even only): bf16 and fp16 from a float32 carrier use torch's cast, which rounds
  float32 correctly; from a float64 carrier the value is first rounded *to odd* into float32 (which
  keeps >= 2 more bits than the target, so the following nearest-even cast is correct).
"""

from __future__ import annotations

from typing import Literal

import torch

from attnum.errors import AttnumInputError
from attnum.formats import PRESETS, FloatFormat, get_format

RoundingMode = Literal["nearest_even", "toward_zero", "stochastic"]
MODES = ("nearest_even", "toward_zero", "stochastic")
_CARRIERS = (torch.float32, torch.float64)
_NATIVE = {"bf16": torch.bfloat16, "fp16": torch.float16}
# float32 -> float8 casts: nearest-even, but torch's e4m3fn cast saturates, so overflow is re-applied.
_NATIVE_FP8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_FP32 = PRESETS["fp32"]
_FP64 = PRESETS["fp64"]


def round_to(
    x: torch.Tensor,
    fmt: str | FloatFormat,
    mode: RoundingMode = "nearest_even",
    *,
    generator: torch.Generator | None = None,
    saturate: bool = False,
) -> torch.Tensor:
    """Round every element of ``x`` to ``fmt``; returns a tensor of x's dtype and shape.

    ``mode``: ``nearest_even`` (IEEE default), ``toward_zero`` (truncation; finite overflow gives
    max), or ``stochastic`` (rounds up with probability equal to the distance from the lower
    neighbour in ulps; reproducible with ``generator``).
    Overflow: inf for IEEE-like formats, NaN for ``fn`` formats, max for formats with neither,
    max for every format when ``saturate=True``. NaN and inf inputs propagate (inf becomes NaN in
    ``fn`` formats and max in formats without inf, as a hardware cast would). Signed zero is kept.
    """
    fmt = get_format(fmt)
    if not isinstance(x, torch.Tensor):
        raise AttnumInputError(f"x={type(x).__name__} is not allowed; expected a torch.Tensor")
    if x.dtype not in _CARRIERS:
        raise AttnumInputError(f"x.dtype={x.dtype} is not allowed; expected torch.float32 or torch.float64")
    if mode not in MODES:
        raise AttnumInputError(f"mode={mode!r} is not allowed; expected one of {MODES}")
    carrier = _FP32 if x.dtype == torch.float32 else _FP64
    if fmt.fits_in(carrier):
        if fmt == carrier:
            return x
        if mode == "nearest_even" and fmt.name in _NATIVE and fmt.subnormals:
            return _round_native(x, _NATIVE[fmt.name], fmt, saturate)
        if mode == "nearest_even" and fmt.name in _NATIVE_FP8 and x.dtype == torch.float32:
            a = x.abs()
            r = _apply_overflow(a.to(_NATIVE_FP8[fmt.name]).to(torch.float32), a, fmt, mode, saturate, cast=True)
            return torch.copysign(r, x)
    return round_generic(x, fmt, mode, generator=generator, saturate=saturate)


def round_generic(
    x: torch.Tensor,
    fmt: FloatFormat,
    mode: RoundingMode = "nearest_even",
    *,
    generator: torch.Generator | None = None,
    saturate: bool = False,
) -> torch.Tensor:
    """The exact scale/round/scale-back path for any format (see the module docstring).

    Computes in float64 unless the carrier is float32 and every value of ``fmt`` is a float32,
    in which case float32 is exact too and twice as fast.
    """
    carrier = _FP32 if x.dtype == torch.float32 else _FP64
    work = x if fmt.fits_in(carrier) else x.double()
    a = work.abs()
    # Binade exponent read from the bits (exact, unlike log2), clamped below at the subnormal
    # binade and above just past the largest binade (so inf/NaN and overflow stay well defined).
    if work.dtype == torch.float32:
        e = (a.view(torch.int32) >> 23).sub_(127)
    else:
        e = (a.view(torch.int64) >> 52).sub_(1023)
    q = e.clamp_(fmt.emin, fmt.emax + 1).sub_(fmt.mbits)  # the format's quantum is 2**q
    if _one_step_scaling(fmt, work.dtype):
        y = a * _pow2(-q, work.dtype)
    else:
        y = _ldexp(a, -q)
    if mode == "nearest_even":
        y = torch.round_(y)
    elif mode == "toward_zero":
        y = torch.trunc_(y)
    else:
        u = torch.rand(y.shape, generator=generator, dtype=y.dtype, device=y.device)
        y = torch.floor_(y.add_(u))
    r = y.mul_(_pow2(q, work.dtype)) if _one_step_scaling(fmt, work.dtype) else _ldexp(y, q)
    if not fmt.subnormals:
        r = torch.where(r < fmt.tiny, torch.zeros_like(r), r)
    r = _apply_overflow(r, a, fmt, mode, saturate)
    return torch.copysign(r, work).to(x.dtype)


def _one_step_scaling(fmt: FloatFormat, dtype: torch.dtype) -> bool:
    """2**q and 2**-q are both normal carrier numbers for every quantum q of the format."""
    lo, hi = fmt.emin - fmt.mbits, fmt.emax + 1 - fmt.mbits
    emin_c, emax_c = (-126, 127) if dtype == torch.float32 else (-1022, 1023)
    return emin_c <= min(lo, -hi) and max(hi, -lo) <= emax_c


def _ldexp(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """x * 2**e, exact wherever the result is representable.

    Two multiplications by powers of two built from their bit patterns, so neither factor
    over- or underflows (torch.ldexp computes 2**e in the default dtype).
    """
    h = torch.div(e, 2, rounding_mode="floor")
    return x * _pow2(h, x.dtype) * _pow2(e - h, x.dtype)


def _pow2(e: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """2**e for integer tensors e inside the normal exponent range of dtype."""
    if dtype == torch.float64:
        return ((e.to(torch.int64) + 1023) << 52).view(torch.float64)
    return ((e.to(torch.int32) + 127) << 23).view(torch.float32)


def _apply_overflow(
    r: torch.Tensor, a: torch.Tensor, fmt: FloatFormat, mode: str, saturate: bool, *, cast: bool = False
) -> torch.Tensor:
    """Magnitudes above max follow the format; inf inputs follow it too; NaN stays NaN.

    ``cast``: r came from a cast that may already have saturated (torch's float8_e4m3fn), so
    out-of-range inputs are found from ``a`` instead: past max + ulp/2, or on it when the tie
    goes up (max has an odd last mantissa bit).
    """
    if cast:
        limit = fmt.max + _half_ulp_at_max(fmt)
        out_of_range = (a > limit) | (a == limit) if _tie_goes_up_at_max(fmt) else a > limit
        r = torch.where(out_of_range, float("inf"), r)
    over = r > fmt.max  # also true where a is inf
    if not bool(over.any()):
        return r
    finite_over = over & torch.isfinite(a)
    clamp = saturate or fmt.specials == "none" or mode == "toward_zero"
    if fmt.specials == "ieee":
        r = torch.where(finite_over, fmt.max if clamp else float("inf"), r)
        if saturate:
            r = torch.where(torch.isinf(a), fmt.max, r)
        return r
    if fmt.specials == "fn":
        fill = fmt.max if (saturate or mode == "toward_zero") else float("nan")
        r = torch.where(finite_over, fill, r)
        return torch.where(torch.isinf(a), fmt.max if saturate else float("nan"), r)
    return torch.where(over, fmt.max, r)  # no inf, no NaN: only saturation is possible


def _half_ulp_at_max(fmt: FloatFormat) -> float:
    return float.fromhex(f"0x1p{fmt.emax - fmt.mbits - 1}")


def _tie_goes_up_at_max(fmt: FloatFormat) -> bool:
    """At max + ulp/2 nearest-even picks the even neighbour: max is even iff its last mantissa bit is 0."""
    last_code = 2**fmt.mbits - (2 if fmt.specials == "fn" else 1)
    return last_code % 2 == 1


def _round_native(x: torch.Tensor, dtype: torch.dtype, fmt: FloatFormat, saturate: bool) -> torch.Tensor:
    """Nearest-even through torch's float32 cast, made single-rounding for float64 input."""
    x32 = _to_float32_round_to_odd(x) if x.dtype == torch.float64 else x
    r = x32.to(dtype).to(x.dtype)
    if saturate:
        r = torch.where(torch.isinf(r), torch.copysign(torch.full_like(r, fmt.max), r), r)
    return r


def _to_float32_round_to_odd(x: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 rounding to odd: truncate, then set the last bit if anything was lost.

    A round-to-odd result with p >= q + 2 bits rounds correctly to q bits afterwards (Boldo and
    Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
    odd", IEEE TC 2008), so float32 is a safe stepping stone to bf16 and fp16.
    """
    a = x.abs()
    f = a.to(torch.float32)
    back = f.to(torch.float64)
    bits = f.view(torch.int32)
    bits = torch.where(back > a, bits - 1, bits)  # the cast rounded up: step back toward zero
    inexact = (back != a) & torch.isfinite(a)
    bits = torch.where(inexact, bits | 1, bits)
    return torch.copysign(bits.view(torch.float32), x.to(torch.float32))
