"""Helpers shared by the example samplers (a file target can import its siblings).

Protocol: ``sampler(target_probs (B, k+1, V), draft_probs (B, k, V), draft_tokens (B, k), generator)``
-> (B, k+1) tokens: accepted drafts, then the resampled or bonus token, then -1.
"""

from __future__ import annotations

import torch


def gathered(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """probs[b, j, tokens[b, j]] -> (B, k)."""
    return probs.gather(-1, tokens[..., None])[..., 0]


def leading(accepted: torch.Tensor) -> torch.Tensor:
    """(B,) number of leading True values (drafts accepted before the first rejection)."""
    return torch.cumprod(accepted.long(), -1).sum(-1)


def assemble(draft_tokens: torch.Tensor, n: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Accepted drafts x_1..x_n, then y at position n, then -1."""
    B, k = draft_tokens.shape
    out = torch.cat([draft_tokens, draft_tokens.new_zeros(B, 1)], -1)
    out = torch.where(torch.arange(k + 1)[None, :] < n[:, None], out, -1)
    out[torch.arange(B), n] = y
    return out


def final_weights(p: torch.Tensor, q: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """(B, V): norm(max(p_n - q_n, 0)) where a draft was rejected (n < k), p_{k+1} otherwise."""
    k = q.shape[1]
    rows = torch.arange(p.shape[0])
    p_n = p[rows, n]
    w = torch.where((n < k)[:, None], (p_n - q[rows, n.clamp(max=k - 1)]).clamp(min=0), p_n)
    return torch.where(w.sum(-1, keepdim=True) > 0, w, p_n)
