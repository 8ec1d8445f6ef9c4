"""FlashAttention-4's two softmax changes as steps of the flash forward (:mod:`attnum.attention.flash`).

Shape alphabet: B batch, H heads, N queries, Bc keys in the tile.

- **Conditional rescaling** (``SoftmaxSm100.update_row_max`` in ``flash_attn/cute/softmax.py``):
  with ``acc_scale_ = (m_old - m_new) * log2(e)``, a row keeps ``m_old`` -- no rescale of O and l,
  alpha = 1 -- while ``acc_scale_ >= -threshold``; P = exp(S - m_old) may then reach 2**threshold.
  O = acc / l at the end divides the same stale factor out of both (the "final correction").
- **Software exp2** (``scale_subtract_rowmax`` + ``ex2_emulation_2``): x = fma(s, log2 e, -m log2 e)
  in fp32, then :func:`attnum.attention.lowbit.exp2.exp2_poly`.
"""

from __future__ import annotations

import math

import torch

from attnum.attention.lowbit.exp2 import exp2_poly, fma32
from attnum.numerics.rounding import round_to

LOG2E = math.log2(math.e)


def lazy_max(m_old_BHN1: torch.Tensor, m_new_BHN1: torch.Tensor, threshold: float) -> torch.Tensor:
    """The running maximum FA4 keeps: m_old where (m_old - m_new) * log2(e) >= -threshold, else
    m_new (a row's first tile, m_old = -inf, always takes m_new)."""
    keep = (m_old_BHN1 - m_new_BHN1) * LOG2E >= -threshold
    return torch.where(keep & torch.isfinite(m_old_BHN1), m_old_BHN1, m_new_BHN1)


def exp_poly(s_BHNBc: torch.Tensor, m_safe_BHN1: torch.Tensor, exp2: str) -> torch.Tensor:
    """exp(s - m) as FA4 forms it: x = fma(s, log2 e, -(m log2 e)) in fp32, then the degree-N
    polynomial exp2 (``exp2='polyN'``); -inf scores (masked) give 0. Returns float32."""
    degree = int(exp2.removeprefix("poly"))
    c = torch.tensor(LOG2E, dtype=torch.float64)
    c32 = round_to(c, "fp32")
    bias = -round_to(round_to(m_safe_BHN1.double(), "fp32") * c32, "fp32")
    s = round_to(s_BHNBc.double(), "fp32")
    masked = torch.isinf(s) & (s < 0)
    x = fma32(torch.where(masked, torch.zeros_like(s), s), c32.expand_as(s), bias.expand_as(s))
    x = torch.where(masked, torch.full_like(x, -math.inf), x)
    return exp2_poly(x, degree)
