"""Standard attention with materialized scores, rounded per policy at every site.

Shape alphabet: B batch, H heads, G kv heads, N queries, S keys, d head dim, dv value dim.
Queries are processed in chunks only to bound memory; every row is computed as in one piece.
"""

from __future__ import annotations

import math

import torch

from attnum.attention import masks, steps
from attnum.policy import Policy, parse_policy


@steps.no_autocast
def baseline_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    policy: str | Policy = "fp32",
) -> torch.Tensor:
    """S = scale Q K^T (+mask) -> P = exp(S - max) -> l = sum P -> A = P / l -> O = A V.

    Returns (B, H, N, dv) in the policy's carrier dtype (float32 or float64) holding values of the
    ``out`` format. Sites used: inputs, scores, exp, row_sum, probs (the normalized A), acc, out.
    """
    policy = parse_policy(policy)
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    c = policy.carrier
    q = policy.round("inputs", q.to(c))
    k = masks.expand_kv(policy.round("inputs", k.to(c)), H)
    v = masks.expand_kv(policy.round("inputs", v.to(c)), H)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    additive, hard = masks.build_masks(attn_mask, is_causal, (B, H, N, S), c, q.device)
    out = torch.zeros(B, H, N, dv, dtype=c, device=q.device)
    if S == 0:  # no keys: every row is empty
        return out
    step = steps.query_chunk(B, H, S)
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        s = steps.scores(q[:, :, i0:i1], k, scale, masks.slice_queries(additive, i0, i1),
                         masks.slice_queries(hard, i0, i1), policy)
        m = steps.safe_max(s.amax(dim=-1, keepdim=True))
        p = policy.round("exp", steps.exp_shifted_(s, m))
        l = policy.round("row_sum", p.sum(dim=-1, keepdim=True))
        a = steps.zero_empty_rows_(p.div_(l), l)
        o = steps.pv(a, v, policy)
        out[:, :, i0:i1] = policy.round("out", o)
    return out
