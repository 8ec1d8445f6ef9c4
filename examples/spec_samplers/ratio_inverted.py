"""BUGGY ON PURPOSE: accepts a draft with probability min(1, q/p) instead of min(1, p/q).
``attnum spec-audit`` fails it (exit 1)."""

from __future__ import annotations

import torch
from spec_common import assemble, final_weights, gathered, leading


def sampler(target_probs, draft_probs, draft_tokens, generator=None):
    p, q, x = target_probs.double(), draft_probs.double(), draft_tokens.long()
    B, k = x.shape
    u = torch.rand((B, k), generator=generator, dtype=torch.float64)
    n = leading(u * gathered(p[:, :k], x) < gathered(q, x))  # BUG: q/p
    return assemble(x, n, torch.multinomial(final_weights(p, q, n), 1, generator=generator)[:, 0])
