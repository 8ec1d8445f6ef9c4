"""Logit soft-capping ``cap * tanh(s / cap)`` must stay finite and accurate for scores far beyond the cap.

Gemma-2 caps attention scores with ``cap * tanh(s / cap)`` (flash-attn's ``softcap``). A kernel that
writes tanh as ``(exp(2x) - 1) / (exp(2x) + 1)`` in float32 overflows both exponentials once
``2 s / cap`` passes 88.7 and returns inf / inf = NaN (vLLM #56578, fixed by vllm-project/vllm PR
#56579, which clamps the argument). Cases: caps 1, 30, 50 with scaled scores of 0.5, 2, 100 and
1000 times the cap (signs mixed, so capped rows saturate at +-cap), where the format can hold them.
The target gets ``softcap=cap``; the reference is plain attention on the capped scores computed in
float64 (an additive mask on zero queries), so golden, baseline and term sizes are the audit's own;
the rounding of the target's fp32 q . k, which the rewrite does not have, is allowed for by the
score-order terms on the capped probabilities (the cap's slope is at most 1).
Only targets declaring ``attnum_softcap = True`` are asked; others get "unsupported".
"""

from __future__ import annotations

import math

import torch

from attnum.audit.construct import representable
from attnum.audit.features import feature_case, score_order_allowance, undeclared
from attnum.audit.harness import Case, Probe, ProbeContext

CAPS = (1.0, 30.0, 50.0)
MULTIPLES = (0.5, 2.0, 100.0, 1000.0)  # |scaled score| / cap; 88 is where exp(2 s / cap) overflows fp32
N, S, D = 16, 64, 64
Q0 = 16.0  # the shared q column: scores come from one k column, exact in every format


def _inputs(ctx: ProbeContext, cap: float, multiple: float):
    """(q (1,1,N,D), k (1,1,S,D), v (1,1,S,D)) in ctx.dtype with |scaled scores| ~ multiple * cap."""
    scale = 1.0 / math.sqrt(D)
    u = torch.rand(S, generator=ctx.generator(salt=5), dtype=torch.float64)
    sign = torch.where(torch.arange(S) % 2 == 0, 1.0, -1.0).double()
    t = sign * (0.5 + u) * (multiple * cap / (Q0 * scale))
    if not representable(float(t.abs().max()), ctx.fmt, headroom=2.0):
        return None
    q = 0.1 * ctx.randn(N, D, salt=1)
    k = 0.1 * ctx.randn(S, D, salt=2)
    q[:, 0], k[:, 0] = Q0, t
    q, k, v = ctx.cast(q, k, ctx.randn(S, D, salt=3))
    return q.view(1, 1, N, D), k.view(1, 1, S, D), v.view(1, 1, S, D)


def run(ctx: ProbeContext) -> list[Case]:
    missing = undeclared(ctx, "softcap", "softcap=cap")
    if missing is not None:
        return [missing]
    cases = []
    for cap in CAPS:
        for multiple in MULTIPLES:
            qkv = _inputs(ctx, cap, multiple)
            if qkv is None:
                continue
            q, k, v = qkv
            s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(D)
            capped = cap * torch.tanh(s / cap)  # float64; the reference's additive scores
            extra = score_order_allowance(q, k, v, torch.softmax(capped, dim=-1))
            cases.append(feature_case(ctx, f"cap {cap:g}, scores ~{multiple:g} x cap", (q, k, v),
                                      {"softcap": cap}, (torch.zeros_like(q), k, v), {"attn_mask": capped}, extra))
    return cases


PROBE = Probe(
    name="softcap-overflow",
    summary="softcap=cap with scaled scores up to 1000 x cap: finite (no inf/inf) and accurate",
    refs=("vllm-project/vllm#56578", "vllm-project/vllm PR #56579", "Gemma-2 logit soft-capping"),
    run=run,
)
