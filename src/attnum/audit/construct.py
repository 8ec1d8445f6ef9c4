"""Building q, k whose logits land exactly where a probe wants them, in a low-precision dtype.

A single product ``A * k0`` cannot place a raw logit at ``-5e4 + 1`` in bf16 (8 significant bits), so
logits are assembled from components: a coarse base ``q[0] * k[0]`` rounded *down* (so "below the
sentinel" stays below after rounding), a fine residual ``q[1] * k[1]``, and one-hot "picks"
``q[i, 2 + i] * k[j, 2 + i]`` that lift chosen (row, key) pairs. Kernels reduce these dot products
in float32 or wider, where every partial sum here is exact.

Shapes: q (N, d), k (S, d); callers add the (B, H) axes.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.verdict import ulp
from attnum.numerics.formats import FloatFormat

BASE_Q = 64.0  # power of two: multiplying by it is exact in every format


def round_down(x: float, dtype: torch.dtype, fmt: FloatFormat) -> float:
    """The largest value of ``dtype`` that is <= x (x negative or positive)."""
    y = float(torch.tensor(x, dtype=torch.float64).to(dtype).double())
    if y > x:
        # 0.75 ulp below y rounds to the grid point under y (or to one of two tied points both
        # below x when y is a power of two approached from above).
        y = float(torch.tensor(y - 0.75 * ulp(fmt, y), dtype=torch.float64).to(dtype).double())
    return y


def logits_qk(*, raw_base: float, n: int, s: int, d: int, dtype: torch.dtype, fmt: FloatFormat,
              picks: tuple[tuple[int, int, float], ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """(q (N, d), k (S, d)) in ``dtype`` with raw q.k = raw_base (+ gap for each (row, key, gap) pick).

    Returns exact values; the caller's golden sees the same rounded tensors.
    """
    if d < 2 + n and picks:
        raise ValueError(f"{d=} must be >= 2 + {n=} to hold one pick column per row")
    q = torch.zeros(n, d, dtype=torch.float64)
    k = torch.zeros(s, d, dtype=torch.float64)
    k0 = round_down(raw_base / BASE_Q, dtype, fmt)
    q[:, 0] = BASE_Q
    k[:, 0] = k0
    q[:, 1] = 1.0
    k[:, 1] = float(torch.tensor(raw_base - BASE_Q * k0, dtype=torch.float64).to(dtype).double())
    for i, j, gap in picks:
        q[i, 2 + i] = 1.0
        k[j, 2 + i] = gap
    return q.to(dtype), k.to(dtype)


def raw_logit(q: torch.Tensor, k: torch.Tensor) -> float:
    """Smallest raw logit (float64) - what the probe's note reports."""
    return float((q.double() @ k.double().T).min())


def representable(scaled_logit: float, fmt: FloatFormat, headroom: float = 1.0) -> bool:
    """Whether a scaled score of this size fits the format (times ``headroom``): a score that no
    implementation in this format can hold is no test of the kernel."""
    return math.isfinite(scaled_logit) and abs(scaled_logit) * headroom < fmt.max


TAIL = 4096  # NaN elements of storage behind a packed K or V (behind_nan)


def behind_nan(x: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``x`` whose storage continues with :data:`TAIL` NaNs (a read past it shows)."""
    flat = torch.full((x.numel() + TAIL,), math.nan, dtype=x.dtype)
    flat[:x.numel()] = x.reshape(-1)
    return flat[:x.numel()].view(x.shape)


def poisons(one_memory: bool = False) -> tuple[str, ...]:
    """What a poisoning case fills with NaN, one at a time: ``"K"``, then ``"V"``. A kernel that masks the
    load of one and not of the other (or masks the scores of a NaN key but multiplies a NaN value by P = 0)
    is caught where it lets the NaN through, and the case names which. ``one_memory``: K and V are one
    tensor (an MLA latent cache): ``"K and V"``."""
    return ("K and V",) if one_memory else ("K", "V")


def fills(which: str) -> tuple[float, float]:
    """(K's fill, V's fill) for the poison ``which`` (:func:`poisons`): NaN where named, 0 elsewhere."""
    return (math.nan if "K" in which else 0.0, math.nan if "V" in which else 0.0)


def plant(k: torch.Tensor, v: torch.Tensor, dead: torch.Tensor, which: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of k, v (..., S, d) with NaN in the keys ``dead`` (bool (S,)) of the operand(s) ``which`` names."""
    k, v = k.clone(), v.clone()
    for x, fill in zip((k, v), fills(which), strict=True):
        if math.isnan(fill):
            x[..., dead, :] = fill
    return k, v
