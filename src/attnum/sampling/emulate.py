"""The emulated arithmetic of a speculative step, one ``round_to`` per named site (see the package
docstring), and the check of probabilities handed in by a user.

Shape alphabet: V vocabulary; leading dims are positions.
"""

from __future__ import annotations

import math

import torch

from attnum.errors import bad_value
from attnum.numerics.formats import FloatFormat
from attnum.numerics.rounding import round_to

SITES = ("logits", "exp", "sum", "probs", "ratio", "residual", "residual_sum", "residual_probs")
_INF = math.inf


def tree_sum(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Pairwise sum over the last dim, every partial sum rounded to ``fmt`` -> (..., 1)."""
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = torch.cat([x, torch.zeros_like(x[..., :1])], dim=-1)  # + 0 is exact
        x = round_to(x[..., 0::2] + x[..., 1::2], fmt)
    return x


def softmax_in(logits: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """softmax over the last dim at sites logits, exp, sum, probs (float64 holding fmt values)."""
    l = round_to(logits.double(), fmt)
    e = round_to(torch.exp(l - l.amax(dim=-1, keepdim=True)), fmt)
    return round_to(e / tree_sum(e, fmt), fmt)


def residual_in(p: torch.Tensor, q: torch.Tensor, fmt: FloatFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(max(p - q, 0)) at sites residual, residual_sum, residual_probs; the sum (..., 1)).
    Rows whose residual is all zero come back as zeros with sum 0."""
    r = round_to(p - q, fmt).clamp_(min=0.0)
    s = tree_sum(r, fmt)
    return torch.where(s > 0, round_to(r / torch.where(s > 0, s, 1.0), fmt), 0.0), s


def ratio_in(p: torch.Tensor, q: torch.Tensor, fmt: FloatFormat, q_zero: str) -> torch.Tensor:
    """p / q at site ratio. Where q = 0: NaN under ``reject`` (vLLM never compares: `draft_prob > 0
    and ...`), p / 0 = inf under ``accept`` (and 0/0 = NaN). NaN is never accepted."""
    r = round_to(p / torch.where(q > 0, q, 1.0), fmt)
    at_zero = torch.where(p > 0, _INF, math.nan) if q_zero == "accept" else torch.full_like(p, math.nan)
    return torch.where(q > 0, r, at_zero)


def accept_prob(ratio: torch.Tensor, uniform_bits: int | None) -> torch.Tensor:
    """P(accept): P(u < ratio) for a continuous u ~ U[0, 1); P(u <= ratio) for u uniform on
    {i * 2**-b : 0 <= i < 2**b} (torch.rand's fp32 grid for b = 24, compared as vLLM and HF do, so
    ratio 0 is accepted when u = 0). NaN ratios are never accepted."""
    r = torch.nan_to_num(ratio, nan=-1.0)
    if uniform_bits is None:
        return r.clamp(0.0, 1.0)
    scale = float(2**uniform_bits)
    return torch.where(r < 0, 0.0, ((torch.floor(r.clamp(max=1.0) * scale) + 1.0) / scale).clamp(max=1.0))


def prob_tolerance(fmt: FloatFormat, V: int) -> float:
    """How far from 1 the sum of V probabilities each correctly rounded to ``fmt`` and summed in
    ``fmt`` (any order) can be: gamma_{V+1} = (V+1)u / (1 - (V+1)u), u = eps/2, plus V half
    subnormals of underflow (Higham, Accuracy and Stability, Lemma 3.1 and section 4.2)."""
    nu = (V + 1) * fmt.eps / 2
    return (nu / (1 - nu) if nu < 1 else _INF) + V * fmt.smallest_subnormal / 2


def check_probs(p: torch.Tensor, fmt: FloatFormat, param: str) -> None:
    """Every row of ``p`` (..., V) is finite, >= 0 and sums to 1 within :func:`prob_tolerance`."""
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()):
        bad = p[~torch.isfinite(p) | (p < 0)][0].item()
        raise bad_value(param, f"a row holding {bad}", "finite probabilities >= 0")
    tol = prob_tolerance(fmt, p.shape[-1])
    sums = p.sum(dim=-1).reshape(-1)
    worst = int(torch.argmax((sums - 1).abs()))
    if abs(sums[worst].item() - 1) > tol:
        raise bad_value(f"{param} row {worst}", f"sum {sums[worst].item():.17g}",
                        f"rows summing to 1 within {fmt.name}'s tolerance {tol:.3g}")
