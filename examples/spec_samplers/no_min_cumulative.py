"""BUGGY ON PURPOSE: the cumulative form of ``cumulative_uniform.py`` with the min(1, .) dropped.

Draft j is accepted while u < prod_{i<=j} p_i(x_i) / q_i(x_i). A ratio above 1 at one position now
lifts the acceptance of the next ones: P(accept 2 | accept 1) = min(1, r_1 r_2) / min(1, r_1) instead
of min(1, r_2). With independent uniforms (``u_j < p/q``) dropping the min changes nothing; here it
does. ``attnum spec-audit`` fails it (exit 1).
"""

from __future__ import annotations

import torch
from spec_common import assemble, final_weights, gathered, leading


def sampler(target_probs, draft_probs, draft_tokens, generator=None):
    p, q, x = target_probs.double(), draft_probs.double(), draft_tokens.long()
    k = q.shape[1]
    ratio = gathered(p[:, :k], x) / gathered(q, x)  # BUG: no .clamp(max=1.0)
    u = torch.rand((p.shape[0], 1), generator=generator, dtype=torch.float64)
    n = leading(u < torch.cumprod(ratio, -1))
    y = torch.multinomial(final_weights(p, q, n), 1, generator=generator)[:, 0]
    return assemble(x, n, y)
