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
_NATIVE = {PRESETS["bf16"]: torch.bfloat16, PRESETS["fp16"]: torch.float16}  # by value: e8m7 is bf16
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
        native = _NATIVE.get(fmt)
        if mode == "nearest_even" and native is not None:
            return _round_native(x, native, fmt, saturate)
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
    shift, bias = (23, 127) if work.dtype == torch.float32 else (52, 1023)
    itype = torch.int32 if work.dtype == torch.float32 else torch.int64
    r = work.abs()  # scratch that becomes the result; ops below are in place (fresh big tensors page-fault)
    # Binade exponent read from the bits (exact, unlike log2), clamped below at the subnormal
    # binade and above just past the largest binade (so inf/NaN and overflow stay well defined).
    q = (r.view(itype) >> shift).sub_(bias).clamp_(fmt.emin, fmt.emax + 1).sub_(fmt.mbits)  # quantum 2**q
    # 2**-q as two powers of two built from their bits, each a normal carrier number for every
    # quantum of every format, so dividing by them is exact (torch.ldexp builds 2**q in the default
    # dtype, which over- and underflows).
    half = q >> 1  # floor(q / 2)
    rest = q.sub_(half)
    p1 = half.add_(bias).bitwise_left_shift_(shift).view(work.dtype)
    p2 = rest.add_(bias).bitwise_left_shift_(shift).view(work.dtype)
    r = r.div_(p1).div_(p2)  # the format's quantum is now 1
    if mode == "nearest_even":
        r = r.round_()  # ties to even
    elif mode == "toward_zero":
        r = r.trunc_()
    else:
        r = r.add_(torch.rand(r.shape, generator=generator, dtype=r.dtype, device=r.device)).floor_()
    r = r.mul_(p1).mul_(p2)
    if not fmt.subnormals:
        r = r.masked_fill_(r < fmt.tiny, 0.0)
    r = _apply_overflow(r, work, fmt, mode, saturate)
    return r.copysign_(work).to(x.dtype)


def _apply_overflow(r: torch.Tensor, src: torch.Tensor, fmt: FloatFormat, mode: str, saturate: bool) -> torch.Tensor:
    """Magnitudes r above max follow the format; inf inputs (``src`` is the signed input) follow it
    too; NaN stays NaN."""
    over = r > fmt.max  # also true where the input is inf
    if not bool(over.any()):
        return r
    finite_over = over & torch.isfinite(src)
    clamp = saturate or fmt.specials == "none" or mode == "toward_zero"
    if fmt.specials == "ieee":
        r = torch.where(finite_over, fmt.max if clamp else float("inf"), r)
        if saturate:
            r = torch.where(torch.isinf(src), fmt.max, r)
        return r
    if fmt.specials == "fn":
        fill = fmt.max if (saturate or mode == "toward_zero") else float("nan")
        r = torch.where(finite_over, fill, r)
        return torch.where(torch.isinf(src), fmt.max if saturate else float("nan"), r)
    return torch.where(over, fmt.max, r)  # no inf, no NaN: only saturation is possible


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
