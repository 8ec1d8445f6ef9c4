"""Attention sinks: one logit per head that joins the softmax denominator only (gpt-oss).

gpt-oss adds a learned per-head sink logit to each row's softmax, ``O_i = sum_j exp(s_ij) V_j /
(exp(sink_h) + sum_j exp(s_ij))`` (openai/gpt-oss, its reference ``sdpa``: the sink is concatenated to
the scores and dropped after the softmax). A kernel
that adds ``exp(sink)`` without the row's running max, applies it once per tile or split, or lets the
sink carry a value row gives rows that are mis-scaled, worst when the sink is far from the scores.
Cases (causal, N = S = 72): sinks from -30 to +30 against scores near 0 and near +20, GQA (H = 4,
G = 2) where the target accepts ``enable_gqa``; then one non-causal case (N = 40, S = 72); and, when the
target's decode entry takes sinks (declared on the entry or the target), two decode cases (one query per
sequence, GQA 4:2, paged, L = 37 and 20).
The target gets ``sinks=`` (H,) float32; the reference is
golden attention with the sink as one more key of score ``sink_h`` (an additive mask on a zero key)
and value 0. Only targets declaring ``attnum_sinks = True`` are asked.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.features import decode_feature_cases, decode_refusal, feature_case, undeclared
from attnum.audit.harness import Case, Probe, ProbeContext

H, N, S, D = 4, 40, 72, 64
SINK_SETS = ((0.0, -3.0, 2.0, 8.0), (-30.0, -30.0, 30.0, 30.0), (20.0, 19.5, 21.0, 25.0))
DECODE_LENS = (37, 20)


def reference(q, k, v, sinks: torch.Tensor, is_causal: bool) -> tuple[tuple, dict]:
    """(q, k', v'), {"attn_mask"}: the sinks as one more key (zero k and v rows) with score sink_h."""
    B, Hq, n, _ = q.shape
    s = k.shape[-2]
    k1 = torch.cat([k, k.new_zeros(*k.shape[:2], 1, k.shape[-1])], dim=-2)
    v1 = torch.cat([v, v.new_zeros(*v.shape[:2], 1, v.shape[-1])], dim=-2)
    mask = torch.zeros(B, Hq, n, s + 1, dtype=torch.float64)
    if is_causal:  # N = S here: no alignment question
        mask[..., :s] = mask[..., :s].masked_fill(torch.ones(n, s, dtype=torch.bool).triu(1), -math.inf)
    mask[..., s] = sinks.double().view(1, Hq, 1)
    return (q, k1, v1), {"attn_mask": mask}


def _case(ctx: ProbeContext, label: str, sinks, shift: float, is_causal: bool, g: int) -> Case:
    n = S if is_causal else N
    q = ctx.randn(1, H, n, D, salt=1)
    k = ctx.randn(1, g, S, D, salt=2)
    q[..., 0], k[..., 0] = 1.0, shift * math.sqrt(D)  # every scaled score moves by +shift
    q, k, v = ctx.cast(q, k, ctx.randn(1, g, S, D, salt=3))
    sink = torch.tensor(sinks, dtype=torch.float32)
    kw = {"is_causal": is_causal, "sinks": sink}
    if g != H:
        kw["enable_gqa"] = True
    ref, ref_kw = reference(q, k, v, sink, is_causal)
    return feature_case(ctx, label, (q, k, v), kw, ref, ref_kw)


def run(ctx: ProbeContext) -> list[Case]:
    missing = undeclared(ctx, "sinks", "sinks=(H,) float32")
    return ([missing] if missing is not None else _sdpa_cases(ctx)) + _decode_cases(ctx)


def _sdpa_cases(ctx: ProbeContext) -> list[Case]:
    cases = []
    # causal first: the decoders with sinks are causal, and some kernels (fla) have no other path
    for sinks in SINK_SETS:
        for shift in (0.0, 20.0):
            cases.append(_case(ctx, f"causal, sinks {sinks}, scores ~{shift:g}", sinks, shift, True, H))
    cases.append(_case(ctx, "causal GQA H = 4, G = 2, sinks (0, -3, 2, 8)", SINK_SETS[0], 0.0, True, 2))
    cases.append(_case(ctx, f"not causal N = {N}, S = {S}, sinks (0, -3, 2, 8)", SINK_SETS[0], 0.0, False, H))
    return cases


def _decode_cases(ctx: ProbeContext) -> list[Case]:
    """The decode entry with ``sinks=``: one query per sequence, GQA H = 4, G = 2, paged, ragged lengths."""
    refused = decode_refusal(ctx, "sinks")
    if refused is not None:
        return refused
    cases = []
    for i, sinks in enumerate(SINK_SETS[:2]):
        q, k, v = ctx.cast(ctx.randn(2, H, 1, D, salt=30 + i), ctx.randn(2, 2, 40, D, salt=31 + i),
                           ctx.randn(2, 2, 40, D, salt=32 + i))
        sink = torch.tensor(sinks, dtype=torch.float32)
        cases += decode_feature_cases(ctx, f"decode, sinks {sinks}, L={DECODE_LENS}", q, k, v,
                                      torch.tensor(DECODE_LENS), feature_kw={"sinks": sink},
                                      rewrite=lambda q1, k1, v1, s=sink: (*reference(q1, k1, v1, s, False), None))
    return cases


PROBE = Probe(
    name="attention-sinks",
    summary="per-head sink logits in the softmax denominator only (gpt-oss), against golden",
    refs=("openai/gpt-oss (gpt_oss/torch/model.py, sdpa with sinks)",),
    run=run,
)
