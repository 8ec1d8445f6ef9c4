"""BUGGY ON PURPOSE: the residual is |p - q| instead of max(p - q, 0) (a sign slip that still
gives non-negative weights, so nothing crashes). ``attnum spec-audit`` fails it (exit 1)."""

from __future__ import annotations

import torch
from spec_common import assemble, gathered, leading


def sampler(target_probs, draft_probs, draft_tokens, generator=None):
    p, q, x = target_probs.double(), draft_probs.double(), draft_tokens.long()
    B, k = x.shape
    u = torch.rand((B, k), generator=generator, dtype=torch.float64)
    n = leading(u * gathered(q, x) < gathered(p[:, :k], x))
    rows = torch.arange(B)
    p_n = p[rows, n]
    w = torch.where((n < k)[:, None], (p_n - q[rows, n.clamp(max=k - 1)]).abs(), p_n)  # BUG: abs
    return assemble(x, n, torch.multinomial(w, 1, generator=generator)[:, 0])
