"""BUGGY ON PURPOSE: when every draft is accepted, the bonus token is drawn from p_k (the last
verified position's target) instead of p_{k+1}: an index off by one. ``attnum spec-audit`` fails it."""

from __future__ import annotations

import torch
from spec_common import assemble, final_weights, gathered, leading


def sampler(target_probs, draft_probs, draft_tokens, generator=None):
    p, q, x = target_probs.double(), draft_probs.double(), draft_tokens.long()
    B, k = x.shape
    u = torch.rand((B, k), generator=generator, dtype=torch.float64)
    n = leading(u * gathered(q, x) < gathered(p[:, :k], x))
    w = final_weights(p, q, n)
    w = torch.where((n == k)[:, None], p[:, k - 1], w)  # BUG: p[:, k] is the bonus position
    return assemble(x, n, torch.multinomial(w, 1, generator=generator)[:, 0])
