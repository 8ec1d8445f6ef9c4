"""Standard attention with materialized scores, rounded per policy at every site.

Shape alphabet: B batch, H heads, G kv heads, N queries, S keys, d head dim, dv value dim.
Queries are processed in chunks only to bound memory; every row is computed as in one piece.
"""

from __future__ import annotations

import torch

from attnum.attention import masks, steps
from attnum.numerics.policy import Policy, parse_policy
from attnum.numerics.rounding import round_ste, round_to


@steps.no_autocast
def baseline_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    policy: str | Policy = "fp32",
) -> torch.Tensor:
    """S = scale Q K^T (+mask) -> P = exp(S - max) -> l = sum P -> A = P / l -> O = A V.

    Returns (B, H, N, dv) in the policy's carrier dtype (float32 or float64) holding values of the
    ``out`` format. Sites used: inputs, scores, exp, row_sum, probs (the normalized A), acc, out;
    ``matmul_acc``/``reduction_chunk`` model both matmuls' accumulators.

    Differentiable when an input requires grad: the same steps, out of place, each site rounding
    its value forward and its gradient backward (:func:`attnum.numerics.rounding.round_ste`); the row max
    is a constant of the softmax and gets no gradient.
    """
    policy = parse_policy(policy)
    if policy.lowbit is not None:  # SageAttention's scheme: its plain reference (exact softmax and P V)
        from attnum.attention.lowbit.sage import sage_reference

        return sage_reference(q, k, v, lowbit=policy.lowbit, policy=policy, attn_mask=attn_mask, is_causal=is_causal,
                              scale=scale, causal_alignment=causal_alignment, window=window)
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    rnd = round_ste if grad else round_to
    c = policy.carrier
    q = steps.load_input(q, policy, rnd)
    k = masks.expand_kv(steps.load_input(k, policy, rnd), H)
    v = masks.expand_kv(steps.load_input(v, policy, rnd), H)
    scale = masks.resolve_scale(scale, d)
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S), causal_alignment=causal_alignment, window=window)
    if S == 0 or N == 0:  # no keys: every row is empty; no queries: no row at all
        return torch.zeros(B, H, N, dv, dtype=c, device=q.device) + 0 * q.sum()
    step = steps.query_chunk(B, H, S)
    chunks = []
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        tile = mk.tile(i0, i1, 0, S, c, q.device)
        chunks.append(_rows(q[:, :, i0:i1], k, v, tile, scale, policy, rnd, grad))
    return torch.cat(chunks, dim=2) if len(chunks) > 1 else chunks[0]


def _rows(q_BHnd, k_BHSd, v_BHSd, tile: masks.Tile, scale: float, policy: Policy, rnd, grad: bool):
    """One query chunk; in place unless differentiated (the same operations, the same bits)."""
    s = steps.scores(q_BHnd, k_BHSd, scale, tile, policy, rnd=rnd)
    m = steps.safe_max(s.amax(dim=-1, keepdim=True)).detach()
    p = rnd(torch.exp(s - m) if grad else steps.exp_shifted_(s, m), policy.exp)
    l = rnd(p.sum(dim=-1, keepdim=True), policy.row_sum)
    if grad:
        # A fully masked row has p = 0 and l = 0: divide by 1 there (0 / 1 = 0) so that neither the
        # value nor its gradient is 0/0. A NaN l (NaN in the data) is not 0 and stays NaN.
        a = p / torch.where(l == 0, torch.ones_like(l), l)
    else:
        a = steps.zero_empty_rows_(p.div_(l), l)
    return rnd(steps.pv(a, v_BHSd, policy, rnd=rnd), policy.out)
