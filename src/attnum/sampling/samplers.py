"""Samplers: attnum's reference speculative sampler in the auditor's protocol, and the Monte-Carlo
run of the emulated procedure with real noise.

Shape alphabet: B batch of steps, k draft tokens, V vocabulary, n samples.
"""

from __future__ import annotations

import torch

from attnum.sampling.emulate import ratio_in, residual_in
from attnum.sampling.law import SpecProcedure, _prepare
from attnum.sampling.noise import draw


def reference_sampler(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """attnum's speculative sampler in the auditor's protocol, textbook form, float64.

    target_probs (B, k+1, V), draft_probs (B, k, V), draft_tokens (B, k) drawn from draft_probs ->
    (B, k+1) int64: the accepted drafts, then the resampled or bonus token, then -1 padding.
    """
    p, q = target_probs.double(), draft_probs.double()
    B, k1, V = p.shape
    k = k1 - 1
    x = draft_tokens.long()
    p_x = p[:, :k].gather(-1, x[..., None])[..., 0]
    q_x = q.gather(-1, x[..., None])[..., 0]
    u = torch.rand((B, k), generator=generator, dtype=torch.float64)
    accepted = u * q_x < p_x  # u < min(1, p/q) without dividing
    n = torch.cumprod(accepted.long(), -1).sum(-1)  # drafts accepted before the first rejection
    rows = torch.arange(B)
    p_n = p[rows, n]
    w = torch.where((n < k)[:, None], (p_n - q[rows, n.clamp(max=k - 1)]).clamp(min=0), p_n)
    w = torch.where(w.sum(-1, keepdim=True) > 0, w, p_n)  # float64 0/0 (p == q up to rounding): p
    y = torch.multinomial(w, 1, generator=generator)[:, 0]
    out = torch.cat([x, x.new_zeros(B, 1)], -1)
    pos = torch.arange(k1)[None, :]
    out = torch.where(pos < n[:, None], out, -1)
    out[rows, n] = y
    return out


def simulate(target, draft, n: int, *, procedure: SpecProcedure | None = None, k: int | None = None,
             kind: str = "logits", generator: torch.Generator | None = None, batch: int = 1 << 14) -> torch.Tensor:
    """Monte-Carlo of the emulated step: (n, k+1) blocks (-1 padding; -2 marks a 0/0 failure).

    The arithmetic is the procedure's (rounded p^, q^, ratio, residual); the randomness is real:
    race noise drawn and clamped, the acceptance uniform drawn on its grid. An independent check of
    :func:`spec_law`, and the path for vocabularies too large to enumerate.
    """
    proc = procedure or SpecProcedure()
    pr = _prepare(target, draft, k, kind, proc)
    k, fmt, noise, b = pr.k, proc.format, proc.noise, proc.uniform_bits
    ratio = ratio_in(pr.p_hat[:k], pr.q_hat, fmt, proc.q_zero)
    r_hat, s = residual_in(pr.p_hat[:k], pr.q_hat, fmt)
    blocks = []
    for b0 in range(0, n, batch):
        B = min(batch, n - b0)
        out = torch.full((B, k + 1), -1, dtype=torch.int64)
        alive = torch.ones(B, dtype=torch.bool)
        for j in range(k):
            x = draw(pr.q_draw[j], B, noise, generator)
            if b is None:
                u = torch.rand(B, generator=generator, dtype=torch.float64)
                acc = u < ratio[j][x]
            else:
                u = torch.randint(0, 2**b, (B,), generator=generator, dtype=torch.int64).double() / 2.0**b
                acc = u <= ratio[j][x]
            if s[j, 0] > 0:
                y = draw(r_hat[j], B, noise, generator)
            elif proc.zero_residual == "first":
                y = torch.zeros(B, dtype=torch.int64)
            elif proc.zero_residual == "target":
                y = draw(pr.p_hat[j], B, noise, generator)
            else:
                y = torch.full((B,), -2, dtype=torch.int64)
            out[:, j] = torch.where(alive, torch.where(acc, x, y), out[:, j])
            alive = alive & acc
        bonus = draw(pr.p_hat[k], B, noise, generator)
        out[:, k] = torch.where(alive, bonus, -1)
        blocks.append(out)
    return torch.cat(blocks)
