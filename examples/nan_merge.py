"""A state merge with no guard for two empty states: ``exp(lse - max)`` with max = -inf.

BUGGY ON PURPOSE - an audit target for ``attnum audit examples/nan_merge.py:target``.

This is the textbook merge, as FlashInfer's Triton ``state_merge`` (flashinfer#4051) and vLLM's Triton
``merge_attn_states`` before vllm#39148: with both LSEs -inf, ``lse - max`` is ``-inf - (-inf)`` = NaN
and the merged row is NaN. An empty state beside a live one is fine (``exp(-inf - finite) = 0``), so it
fails ``merge-two-empty`` only.
"""

from __future__ import annotations

import torch

from attnum.kernels.serving import ServingTarget


def merge_state(o_a, lse_a, o_b, lse_b):
    """FlashInfer layout: o (T, H, dv), lse (T, H) float32, natural log."""
    m = torch.maximum(lse_a, lse_b)
    e_a, e_b = torch.exp(lse_a - m), torch.exp(lse_b - m)  # NaN when both are -inf
    d = e_a + e_b
    o = o_a.float() * (e_a / d)[..., None] + o_b.float() * (e_b / d)[..., None]
    return o.to(o_a.dtype), m + torch.log(d)


target = ServingTarget("nan-merge", merge_state=merge_state)
