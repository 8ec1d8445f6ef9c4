"""CORRECT, though not the textbook form: one uniform per step instead of one per draft.

Draft j is accepted while u < prod_{i<=j} min(1, p_i(x_i) / q_i(x_i)). Given the drafts, the number
accepted then has P(n >= j) = prod_{i<=j} min(1, r_i), exactly as with independent uniforms, so the
emitted block has the same law. ``attnum spec-audit`` passes it (exit 0).
"""

from __future__ import annotations

import torch
from spec_common import assemble, final_weights, gathered, leading


def sampler(target_probs, draft_probs, draft_tokens, generator=None):
    p, q, x = target_probs.double(), draft_probs.double(), draft_tokens.long()
    k = q.shape[1]
    ratio = (gathered(p[:, :k], x) / gathered(q, x)).clamp(max=1.0)
    u = torch.rand((p.shape[0], 1), generator=generator, dtype=torch.float64)
    n = leading(u < torch.cumprod(ratio, -1))
    y = torch.multinomial(final_weights(p, q, n), 1, generator=generator)[:, 0]
    return assemble(x, n, y)
