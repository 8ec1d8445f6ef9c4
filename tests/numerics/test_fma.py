"""attnum.numerics.fma.fma_round against exact rational arithmetic: one rounding of a * b + c."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from attnum.numerics.fma import fma_round


def _nearest_even(x: Fraction, dt) -> float:
    """x rounded to the numpy float type ``dt`` by exact comparison of the neighbours (ties to even)."""
    guess = dt(float(x))  # within one ulp of x (float(Fraction) is correctly rounded)
    cands = {guess, np.nextafter(guess, dt(np.inf)), np.nextafter(guess, dt(-np.inf))}
    cands = [c for c in cands if np.isfinite(c)]
    dist = {c: abs(Fraction(float(c)) - x) for c in cands}
    best = min(dist.values())
    ties = [c for c in cands if dist[c] == best]
    bits = {np.float32: np.uint32, np.float16: np.uint16}[dt]
    return float(min(ties, key=lambda c: int(np.array(c, dtype=dt).view(bits)) & 1))


def _triples(dt, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(dt)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-6, 7, n)).astype(dt)
    c = rng.standard_normal(n).astype(dt)
    half = n // 2  # cancellation: c near -a*b, where a separate rounding of a*b loses the most
    c[:half] = (-(a[:half].astype(np.float64) * b[:half]) * (1 + rng.standard_normal(half) * 2.0 ** -20)).astype(dt)
    return a, b, c


@pytest.mark.parametrize(("dt", "fmt"), [(np.float32, "fp32"), (np.float16, "fp16")])
def test_fma_round_is_one_rounding_of_the_exact_value(dt, fmt):
    a, b, c = _triples(dt, 4000, seed=1 if dt is np.float32 else 2)
    got = fma_round(*(torch.from_numpy(x.astype(np.float64)) for x in (a, b, c)), fmt).numpy()
    want = np.array([_nearest_even(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), dt)
                     for x, y, z in zip(a, b, c)])
    finite = np.isfinite(want)
    assert finite.mean() > 0.99
    assert np.array_equal(got[finite], want[finite])
    twice = (a.astype(dt) * b + c).astype(np.float64)  # two roundings: must differ somewhere, or the test is idle
    assert (twice != want).sum() > 10


def test_fma_round_special_values():
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([inf, 0.0, 2.0, -0.0, 0.0, 3.0e38, 1.0], dtype=torch.float64)
    b = torch.tensor([1.0, inf, 3.0, 1.0, -1.0, 10.0, 1.0], dtype=torch.float64)
    c = torch.tensor([1.0, 1.0, inf, -0.0, 0.0, 0.0, nan], dtype=torch.float64)
    got = fma_round(a, b, c, "fp32")
    assert got[0] == inf and torch.isnan(got[1]) and got[2] == inf
    assert got[3] == 0 and torch.signbit(got[3])  # -0 * 1 + -0 = -0
    assert got[4] == 0 and not torch.signbit(got[4])  # 0 * -1 + 0 = +0 (round to nearest)
    assert got[5] == inf and torch.isnan(got[6])  # overflow rounds to inf


def test_fma_round_where_float64_alone_would_round_twice():
    """a * b + c = 1 + 2**-24 + 2**-70: just above the fp32 midpoint between 1 and 1 + 2**-23, so fp32's
    answer is 1 + 2**-23; float64 drops the 2**-70 and lands on the midpoint, whose tie goes to 1.0."""
    k = torch.arange(-20, 21, dtype=torch.float64)
    a = -(2.0 ** -24) * (1 + 2.0 ** -23) * 2.0 ** k
    b = torch.full_like(a, 1 - 2.0 ** -23)
    c = (1 + 2.0 ** -23) * 2.0 ** k
    got = fma_round(a, b, c, "fp32")
    assert torch.equal(got, c)  # 1 + 2**-23, scaled
    assert not torch.equal(torch.from_numpy((a * b + c).numpy().astype(np.float32)).double(), c)
