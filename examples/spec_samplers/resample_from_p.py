"""BUGGY ON PURPOSE: on rejection, resample from p_j instead of norm(max(p_j - q_j, 0)).

The accepted drafts already carry min(p, q) of the mass; drawing the rejection's token from p counts
that part twice, so tokens where q > p come out too often. ``attnum spec-audit`` fails it (exit 1).
"""

from __future__ import annotations

import torch
from spec_common import assemble, gathered, leading


def sampler(target_probs, draft_probs, draft_tokens, generator=None):
    p, q, x = target_probs.double(), draft_probs.double(), draft_tokens.long()
    B, k = x.shape
    u = torch.rand((B, k), generator=generator, dtype=torch.float64)
    n = leading(u * gathered(q, x) < gathered(p[:, :k], x))
    y = torch.multinomial(p[torch.arange(B), n], 1, generator=generator)[:, 0]  # BUG: p, not the residual
    return assemble(x, n, y)
