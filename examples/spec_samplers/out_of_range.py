"""BUGGY ON PURPOSE: resamples over a vocabulary padded to a multiple of 8, with the padding given a
tiny weight instead of 0, so now and then it returns a token id >= V (the class of vLLM's
GHSA-8wr5-jm2h-8r4f: ids beyond the vocabulary). ``attnum spec-audit`` stops with one line, exit 2."""

from __future__ import annotations

import torch
from spec_common import assemble, final_weights, gathered, leading


def sampler(target_probs, draft_probs, draft_tokens, generator=None):
    p, q, x = target_probs.double(), draft_probs.double(), draft_tokens.long()
    B, k = x.shape
    V = p.shape[-1]
    u = torch.rand((B, k), generator=generator, dtype=torch.float64)
    n = leading(u * gathered(q, x) < gathered(p[:, :k], x))
    w = final_weights(p, q, n)
    pad = -V % 8 or 8
    w = torch.cat([w, torch.full((B, pad), 1e-3, dtype=w.dtype)], -1)  # BUG: padding is not weight 0
    return assemble(x, n, torch.multinomial(w, 1, generator=generator)[:, 0])
