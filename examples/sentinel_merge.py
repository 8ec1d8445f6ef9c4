"""A state merge with FlashInfer's pre-#4401 sentinel: "minus infinity" is the finite -5e4.

BUGGY ON PURPOSE - an audit target for ``attnum audit examples/sentinel_merge.py:target``.

The merge clamps both LSEs at ``MASK_VALUE = -5e4`` before ``exp(lse - max)``, so an empty state
(LSE -inf) weighs as much as a live state whose LSE lies below -5e4: their merge halves the live output
(flashinfer#4450/#4451). Two empty states are handled by an explicit guard, and states with ordinary
LSEs merge correctly, so random-input tests pass. Fails ``merge-empty-split`` only.
"""

from __future__ import annotations

import torch

from attnum.kernels.serving import ServingTarget

MASK_VALUE = -5e4  # the bug: finite


def merge_state(o_a, lse_a, o_b, lse_b):
    """FlashInfer layout: o (T, H, dv), lse (T, H) float32, natural log."""
    both_empty = torch.isneginf(lse_a) & torch.isneginf(lse_b)
    s_a, s_b = lse_a.clamp_min(MASK_VALUE), lse_b.clamp_min(MASK_VALUE)
    m = torch.maximum(s_a, s_b)
    e_a, e_b = torch.exp(s_a - m), torch.exp(s_b - m)
    d = e_a + e_b
    o = (o_a.float() * (e_a / d)[..., None] + o_b.float() * (e_b / d)[..., None])
    lse = m + torch.log(d)
    o = torch.where(both_empty[..., None], torch.zeros_like(o), o)
    lse = torch.where(both_empty, torch.full_like(lse, float("-inf")), lse)
    return o.to(o_a.dtype), lse


target = ServingTarget("sentinel-merge", merge_state=merge_state)
