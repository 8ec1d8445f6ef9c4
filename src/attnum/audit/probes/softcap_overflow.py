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
Only targets declaring ``attnum_softcap = True`` are asked; others get "unsupported". When the target's
decode entry takes it too (declared on the entry or the target: vLLM's and SGLang's Triton decode kernels call
it ``logit_cap``), three decode cases ask it there: caps 1 and 50 with scores up to 1000 x cap, one query per
sequence, GQA 2:1, paged, ragged lengths.
"""

from __future__ import annotations

import math

import torch

from attnum.attention import masks
from attnum.audit.construct import representable
from attnum.audit.features import decode_feature_cases, decode_refusal, feature_case, score_order_allowance, undeclared
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import latent

CAPS = (1.0, 30.0, 50.0)
MULTIPLES = (0.5, 2.0, 100.0, 1000.0)  # |scaled score| / cap; 88 is where exp(2 s / cap) overflows fp32
N, S, D = 16, 64, 64
Q0 = 16.0  # the shared q column: scores come from one k column, exact in every format
DECODE = ((1.0, 2.0), (50.0, 100.0), (50.0, 1000.0))  # (cap, multiple) of the decode cases
DECODE_LENS = (40, 23)


def _inputs(ctx: ProbeContext, cap: float, multiple: float, *, B: int = 1, H: int = 1, G: int = 1, n: int = N,
            s: int = S):
    """(q (B, H, n, D), k (B, G, s, D), v (B, G, s, D)) in ctx.dtype with |scaled scores| ~ multiple * cap
    (None when the format cannot hold them); v = k for an MLA latent target."""
    scale = 1.0 / math.sqrt(D)
    u = torch.rand(B, G, s, generator=ctx.generator(salt=5), dtype=torch.float64)
    sign = torch.where(torch.arange(s) % 2 == 0, 1.0, -1.0).double()
    t = sign * (0.5 + u) * (multiple * cap / (Q0 * scale))
    if not representable(float(t.abs().max()), ctx.fmt, headroom=2.0):
        return None
    q = 0.1 * ctx.randn(B, H, n, D, salt=1)
    k = 0.1 * ctx.randn(B, G, s, D, salt=2)
    q[..., 0], k[..., 0] = Q0, t
    q, k, v = ctx.cast(q, k, ctx.randn(B, G, s, D, salt=3))
    return q, k, k.clone() if latent(ctx) else v


def rewrite(q, k, v, cap: float):
    """The capped scores (float64) as an additive mask on zero queries, and the score-order allowance."""
    s = (q.double() @ masks.expand_kv(k.double(), q.shape[1]).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    capped = cap * torch.tanh(s / cap)  # float64; the reference's additive scores
    extra = score_order_allowance(q, k, v, torch.softmax(capped, dim=-1))
    return (torch.zeros_like(q), k, v), {"attn_mask": capped}, extra


def run(ctx: ProbeContext) -> list[Case]:
    missing = undeclared(ctx, "softcap", "softcap=cap")
    return ([missing] if missing is not None else _sdpa_cases(ctx)) + _decode_cases(ctx)


def _sdpa_cases(ctx: ProbeContext) -> list[Case]:
    cases = []
    for cap in CAPS:
        for multiple in MULTIPLES:
            qkv = _inputs(ctx, cap, multiple)
            if qkv is None:
                continue
            ref, ref_kw, extra = rewrite(*ctx.received(*qkv), cap)  # on what the kernel computes with
            cases.append(feature_case(ctx, f"cap {cap:g}, scores ~{multiple:g} x cap", qkv, {"softcap": cap},
                                      ref, ref_kw, extra))
    return cases


def _decode_cases(ctx: ProbeContext) -> list[Case]:
    """The decode entry with ``softcap=``: one query per sequence over a paged cache (GQA 2:1, ragged lengths)."""
    refused = decode_refusal(ctx, "softcap")
    if refused is not None:
        return refused
    cases = []
    for cap, multiple in DECODE:
        qkv = _inputs(ctx, cap, multiple, B=2, H=2, G=1, n=1, s=max(DECODE_LENS))
        if qkv is None:
            continue
        cases += decode_feature_cases(ctx, f"decode, cap {cap:g}, scores ~{multiple:g} x cap, L={DECODE_LENS}",
                                      *qkv, torch.tensor(DECODE_LENS), feature_kw={"softcap": cap},
                                      rewrite=lambda q, k, v, c=cap: rewrite(q, k, v, c))
    return cases


PROBE = Probe(
    name="softcap-overflow",
    summary="softcap=cap with scaled scores up to 1000 x cap: finite (no inf/inf) and accurate",
    refs=("vllm-project/vllm#56578", "vllm-project/vllm PR #56579", "Gemma-2 logit soft-capping"),
    run=run,
)
