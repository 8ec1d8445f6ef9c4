"""The arithmetic steps baseline and flash share, each ending at a named rounding site.

Shape alphabet: B batch, H heads, N queries, S keys (or a block of Bc keys), d head dim, dv value dim.
"""

from __future__ import annotations

import torch

from attnum.policy import Policy
from attnum.rounding import round_to


def matmul(a: torch.Tensor, b: torch.Tensor, policy: Policy) -> torch.Tensor:
    """a @ b under the policy's accumulation model (unrounded at the output site).

    exact/native: one BLAS call in the carrier. emulated: the reduction dimension is summed
    ``reduction_chunk`` products at a time exactly (float64), each partial sum added into an
    accumulator rounded to ``matmul_acc``.
    """
    if policy.matmul_mode != "emulated":
        return a @ b
    chunk = policy.reduction_chunk or 1
    k = a.shape[-1]
    acc = None
    for c0 in range(0, k, chunk):
        part = a[..., c0:c0 + chunk] @ b[..., c0:c0 + chunk, :]
        acc = part if acc is None else acc + part
        acc = round_to(acc, policy.matmul_acc)
    return acc


def scores(
    q_BHNd: torch.Tensor,
    k_BHSd: torch.Tensor,
    scale: float,
    additive: torch.Tensor | None,
    hard: torch.Tensor | None,
    policy: Policy,
) -> torch.Tensor:
    """S = scale * Q K^T rounded at ``scores``; an additive mask is added and rounded there again
    (as torch adds a float mask in the scores' dtype); -inf masking is exact."""
    s_BHNS = policy.round("scores", matmul(q_BHNd, k_BHSd.transpose(-1, -2), policy).mul_(scale))
    if additive is not None:
        s_BHNS = policy.round("scores", s_BHNS.add_(additive))
    if hard is not None:
        s_BHNS = s_BHNS.add_(hard)
    return s_BHNS


def zero_empty_rows_(x: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """Rows whose softmax denominator is exactly 0 (every key masked) become 0 instead of 0/0.
    NaN denominators (NaN in the data) stay NaN: they are data, not empty rows."""
    empty = l == 0
    return x.masked_fill_(empty, 0.0) if bool(empty.any()) else x


def exp_shifted_(s: torch.Tensor, m_safe: torch.Tensor) -> torch.Tensor:
    """exp(s - m) computed in place in s (s is a scratch tensor owned by the caller)."""
    return s.sub_(m_safe).exp_()


def safe_max(m: torch.Tensor) -> torch.Tensor:
    """The row maximum to subtract: 0 where the row has no unmasked key yet (m = -inf), so that
    exp(-inf - m) is 0 rather than NaN, as FlashAttention does."""
    return torch.where(m == float("-inf"), torch.zeros_like(m), m)


def pv(p_BHNS: torch.Tensor, v_BHSd: torch.Tensor, policy: Policy) -> torch.Tensor:
    """P V with P rounded at ``probs`` and the product rounded at ``acc``."""
    return policy.round("acc", matmul(policy.round("probs", p_BHNS), v_BHSd, policy))


def query_chunk(B: int, H: int, S: int, budget_elems: int = 1 << 24) -> int:
    """Rows per query chunk so one (B, H, chunk, S) score tensor stays near ``budget_elems``."""
    return max(1, budget_elems // max(1, B * H * S))
