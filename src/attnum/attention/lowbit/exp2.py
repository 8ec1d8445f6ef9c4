"""FlashAttention-4's software exp2: Cody-Waite range reduction and a minimax polynomial on FMA units.

Source: Dao-AILab/flash-attention, ``flash_attn/cute/utils.py`` (``POLY_EX2``, ``ex2_emulation``,
``ex2_emulation_2``, ``evaluate_polynomial_2``, ``combine_int_frac_ex2``; the inline-PTX twin
``e2e_asm2`` spells the same steps), used by ``flash_attn/cute/softmax.py``
(``SoftmaxSm100.apply_exp2_convert``) for a fraction of the score elements on Blackwell. Steps, all fp32:

1. ``xc = max.ftz(x, -127)`` (x <= 127 is assumed by the kernel);
2. ``r = add.rm(xc, 1.5 * 2**23)``: rounding down puts floor(xc) in r's low mantissa bits;
3. ``f = (xc - (r - 1.5 * 2**23))`` in round-to-nearest: the fraction in [0, 1] (rounded when xc < 0
   and small: x - floor(x) can need more than 24 bits);
4. ``p = fma(fma(fma(c3, f, c2), f, c1), f, c0)`` (Horner, one rounding per FMA, ``.rn.ftz``), the
   degree-3 coefficients of ``POLY_EX2[3]`` (Sollya ``fpminimax(2**x, 3, [|1, 24...|], [0; 1], relative)``);
5. ``bits(r) << 23`` plus ``bits(p)`` as 32-bit integers: adds floor(xc) to p's exponent field.

:func:`exp2_poly` runs these steps on tensors (each FMA exact through float64 and round-to-odd, then
one :func:`attnum.round_to` to fp32); :func:`exp2_poly_reference` is the same algorithm on one
Python float with exact rational arithmetic (:class:`fractions.Fraction`).
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import torch

from attnum.errors import bad_value
from attnum.numerics.fma import fma_round
from attnum.numerics.rounding import round_to

# POLY_EX2 in flash_attn/cute/utils.py (each an exact fp32 value), lowest degree first.
POLY_EX2: dict[int, tuple[float, ...]] = {
    1: (1.0, 0.922497093677520751953125),
    2: (1.0, 0.6657850742340087890625, 0.330107033252716064453125),
    3: (1.0, 0.695146143436431884765625, 0.227564394474029541015625, 0.077119089663028717041015625),
    4: (1.0, 0.693042695522308349609375, 0.2412912547588348388671875, 5.2225358784198760986328125e-2,
        1.3434938155114650726318359375e-2),
    5: (1.0, 0.693151414394378662109375, 0.24016360938549041748046875, 5.5802188813686370849609375e-2,
        9.01452265679836273193359375e-3, 1.86810153536498546600341796875e-3),
}
ROUND_INT = float(2**23 + 2**22)  # fp32_round_int
CLAMP = -127.0
_TINY32 = 2.0**-126


def _check_degree(degree: int) -> tuple[float, ...]:
    if degree not in POLY_EX2:
        raise bad_value("exp2 degree", degree, f"one of {sorted(POLY_EX2)} (FA4's POLY_EX2)")
    return POLY_EX2[degree]


def _ftz(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x.abs() < _TINY32, torch.zeros_like(x), x)


def fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """fma.rn.ftz.f32: a * b + c rounded once to fp32 (a, b, c float64 tensors holding fp32 values),
    the result flushed to zero below fp32's normal range (:func:`attnum.numerics.fma.fma_round`)."""
    return _ftz(fma_round(a, b, c, "fp32"))


def exp2_poly(x: torch.Tensor, degree: int = 3) -> torch.Tensor:
    """FA4's ``ex2_emulation`` of every element of ``x`` (fp32 values in a float32/float64 tensor);
    returns float32. Inputs above 127 are outside the kernel's contract (as there)."""
    coeffs = _check_degree(degree)
    x = _ftz(x.to(torch.float64))
    xc = torch.clamp(x, min=CLAMP)  # max.ftz (NaN propagates through clamp as through fmax's NaN rule)
    # add.rm(xc, 1.5 * 2**23) is exactly 1.5 * 2**23 + floor(xc) (|xc| <= 127, ulp 1 in [2**23, 2**24));
    # adding in float64 first would round tiny xc away (1.5 * 2**23 - 1e-30 -> 1.5 * 2**23).
    r = ROUND_INT + torch.floor(xc)
    back = r - ROUND_INT  # sub.rn, exact
    f = round_to(xc - back, "fp32")  # sub.rn: xc - floor(xc) exact in float64 wherever fp32 could tie
    out = torch.full_like(f, coeffs[-1])
    for c in coeffs[-2::-1]:
        out = fma32(out, f, torch.full_like(f, c))
    r_bits = r.to(torch.float32).view(torch.int32).to(torch.int64)
    p_bits = out.to(torch.float32).view(torch.int32).to(torch.int64)
    word = ((r_bits << 23) + p_bits) & 0xFFFFFFFF
    word = torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)
    return word.view(torch.float32)


# ---- the plain reference: one float at a time, exact rationals ---------------------------------

def _f32(q: Fraction, mode: str = "nearest") -> float:
    """Round a rational to fp32 (nearest-even or down), with fp32's subnormals."""
    if q == 0:
        return 0.0
    sign = -1 if q < 0 else 1
    a = abs(q)
    e = max(math.floor(math.log2(a.numerator) - math.log2(a.denominator)), -126)
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, -126)
    quantum = Fraction(2) ** (e - 23)
    n, rem = divmod(a, quantum)
    if mode == "down":
        n = n + 1 if (sign < 0 and rem) else n
    elif rem * 2 > quantum or (rem * 2 == quantum and n % 2):
        n += 1
    return float(sign * n * quantum)


def _bits32(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def exp2_poly_reference(x: float, degree: int = 3) -> float:
    """The same five steps as :func:`exp2_poly` on one fp32 value, every operation exact in
    :class:`~fractions.Fraction` and rounded once."""
    coeffs = _check_degree(degree)
    if math.isnan(x):
        return math.nan
    x = 0.0 if abs(x) < _TINY32 else x
    xc = max(x, CLAMP)
    r = _f32(Fraction(xc) + Fraction(ROUND_INT), "down")
    f = _f32(Fraction(xc) - (Fraction(r) - Fraction(ROUND_INT)))
    out = coeffs[-1]
    for c in coeffs[-2::-1]:
        out = _f32(Fraction(out) * Fraction(f) + Fraction(c))
        out = 0.0 if abs(out) < _TINY32 else out
    word = ((_bits32(r) << 23) + _bits32(out)) & 0xFFFFFFFF
    return struct.unpack("<f", struct.pack("<I", word))[0]


def ulp_error(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """|y - 2**x| in units of the fp32 ulp of the exact 2**x (float64 exp2 is exact to ~1e-16 relative,
    far below an fp32 ulp); x and y float tensors, the result float64."""
    ref = torch.exp2(x.to(torch.float64))
    _, e = torch.frexp(ref)  # ref = m 2**e, m in [0.5, 1): its fp32 ulp is 2**(e - 24), subnormals 2**-149
    ulp = torch.exp2(torch.clamp(e.to(torch.float64) - 24, min=-149))
    return (y.to(torch.float64) - ref).abs() / ulp


def binade(e: int, negative: bool = False) -> torch.Tensor:
    """Every fp32 value in [2**e, 2**(e+1)) (or its negation), as a float32 tensor of 2**23 values."""
    if not -126 <= e <= 127:
        raise bad_value("binade", e, "an exponent in -126..127 (normal fp32 binades)")
    start = (e + 127) << 23
    bits = torch.arange(start, start + 2**23, dtype=torch.int32)
    v = bits.view(torch.float32)
    return -v if negative else v
