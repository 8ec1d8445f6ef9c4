"""Fused multiply-add: ``a * b + c`` rounded once to a format, exactly.

The product of two values of at most 26 significant bits (fp32 and narrower) is exact in float64; a
TwoSum then gives ``a * b + c = s + e`` exactly; ``s`` is rounded to odd (the neighbour with an odd
last bit when ``e != 0``), which keeps the one following nearest-even rounding to any format of at
most 51 bits correct (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved
algorithms using rounding to odd", IEEE Transactions on Computers 57(4), 2008).
"""

from __future__ import annotations

import torch

from attnum.numerics.rounding import round_to


def fma_round(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, fmt: str = "fp32") -> torch.Tensor:
    """``a * b + c`` rounded once to ``fmt`` (nearest even), as ``fma.rn`` computes it. ``a``, ``b``,
    ``c``: float64 tensors (broadcastable) holding values of ``fmt`` or narrower; returns float64 on
    ``fmt``'s grid. Infinities and NaN follow IEEE (inf * 0 + c is NaN)."""
    p = a * b
    s = p + c
    bb = s - p
    e = (p - (s - bb)) + (c - bb)
    bits = s.abs().view(torch.int64)
    away = (e != 0) & ((e > 0) == (s > 0))
    toward = (e != 0) & ~away
    odd = (bits & 1) == 1
    bits = torch.where(away & ~odd, bits + 1, torch.where(toward & ~odd, bits - 1, bits))
    s_odd = torch.copysign(bits.view(torch.float64), s)
    return round_to(torch.where(torch.isfinite(s), s_odd, s), fmt)  # site: fma
