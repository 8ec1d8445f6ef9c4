"""Pearson's chi-square test of observed blocks against the exact law, and its power analysis.

The power analysis is the asymptotic one: under an alternative law pi' the statistic is noncentral
chi-square with df = bins - 1 and noncentrality lambda = n * sum_i (pi'_i - pi_i)**2 / pi_i. By
Cauchy-Schwarz, sum_i d_i**2 / pi_i >= (sum_i |d_i|)**2 / sum_i pi_i = 4 TV**2 for *every* alternative
at total-variation distance TV on the bins, so the test detects every such alternative with the stated
power once 4 n TV**2 >= lambda_needed(df, alpha, power). That gives the detectable TV for n samples,
and the n that a wanted TV needs.
"""

from __future__ import annotations

import math

import torch

MIN_EXPECTED = 5.0  # Cochran's rule: bins expected to hold fewer are pooled


def chi2_sf(x: float, df: int) -> float:
    """P(chi2_df > x) (the regularised upper incomplete gamma function)."""
    if df <= 0:
        return 0.0 if x > 0 else 1.0
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(max(x, 0.0) / 2, dtype=torch.float64)))


def chi2_isf(p: float, df: int) -> float:
    """The x with P(chi2_df > x) = p, by bisection (the survival function is monotone)."""
    lo, hi = 0.0, max(1.0, 2.0 * df)
    while chi2_sf(hi, df) > p:
        hi *= 2
    for _ in range(64):  # 2**-64 of the bracket: below float64 resolution of x
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if chi2_sf(mid, df) > p else (lo, mid)
    return hi


def ncx2_sf(x: float, df: int, lam: float) -> float:
    """P(noncentral chi2(df, lam) > x): the Poisson(lam/2) mixture of central chi-squares."""
    if lam == 0:
        return chi2_sf(x, df)
    half = lam / 2
    j_hi = int(half + 12 * math.sqrt(half) + 60)
    j = torch.arange(0, j_hi + 1, dtype=torch.float64)
    logw = -half + j * math.log(half) - torch.lgamma(j + 1)
    sf = torch.special.gammaincc((df + 2 * j) / 2, torch.tensor(x / 2, dtype=torch.float64))
    return float((torch.exp(logw) * sf).sum())


def lambda_needed(df: int, alpha: float, power: float) -> float:
    """The noncentrality at which the level-alpha test rejects with probability ``power``."""
    crit = chi2_isf(alpha, df)
    lo, hi = 0.0, 1.0
    while ncx2_sf(crit, df, hi) < power:
        hi *= 2
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ncx2_sf(crit, df, mid) < power else (lo, mid)
    return hi


def detectable_tv(n: int, df: int, alpha: float, power: float) -> float:
    """The smallest TV (on the bins) that n samples detect with ``power`` at false-alarm ``alpha``."""
    return min(1.0, math.sqrt(lambda_needed(df, alpha, power) / (4 * n)))


def samples_for_tv(tv: float, df: int, alpha: float, power: float) -> int:
    return math.ceil(lambda_needed(df, alpha, power) / (4 * tv * tv))


def bins(expected: torch.Tensor, n: int) -> torch.Tensor:
    """Bin id per cell (-1: probability exactly 0, tested separately): cells expected to hold fewer
    than MIN_EXPECTED of n samples share one bin, merged into the smallest regular bin if it is
    itself below MIN_EXPECTED."""
    ids = torch.full(expected.shape, -1, dtype=torch.int64)
    pos = expected > 0
    big = pos & (expected * n >= MIN_EXPECTED)
    ids[big] = torch.arange(int(big.sum()))
    small = pos & ~big
    nbig = int(big.sum())
    if bool(small.any()):
        if nbig and float(expected[small].sum()) * n < MIN_EXPECTED:
            smallest = int(torch.argmin(torch.where(big, expected, math.inf)))
            ids[small] = ids[smallest]
        else:
            ids[small] = nbig
    return ids


def pearson(counts: torch.Tensor, expected: torch.Tensor, ids: torch.Tensor) -> tuple[float, int]:
    """(statistic, df) of Pearson's chi-square over the bins ``ids`` (cells with id -1 left out)."""
    keep = ids >= 0
    nb = int(ids[keep].max()) + 1 if bool(keep.any()) else 0
    obs = torch.zeros(nb, dtype=torch.float64).index_add_(0, ids[keep], counts[keep].double())
    exp = torch.zeros(nb, dtype=torch.float64).index_add_(0, ids[keep], expected[keep].double())
    n = obs.sum()
    if n == 0:  # every block fell in cells of probability 0 (counted as impossible by the caller)
        return float("inf"), nb - 1
    e = exp / exp.sum() * n
    return float(((obs - e) ** 2 / e).sum()), nb - 1
