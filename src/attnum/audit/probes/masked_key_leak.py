"""Masked keys must have no influence, even when valid logits sit just above a finite sentinel.

Models the second failure mode of a finite mask value (ohdearquant/lattice#361, fixed in #373; the
FlashInfer -5e4 sentinel of flashinfer-ai/flashinfer#4401):
masked logits are filled with a finite F, so when the valid logits are F + delta the masked keys keep
a weight of about exp(-delta * scale), and when valid logits fall below F the masked keys dominate.
Masked V rows hold a large constant, so any leaked weight shows in the output. A third case gives the
masked keys much larger logits than the valid ones.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.construct import logits_qk, representable
from attnum.audit.harness import Case, Probe, ProbeContext

FILLS = (-1e4, -5e4, -65504.0)  # finite sentinels seen in kernels (fp16 max among them)
DELTAS = (1.0, 10.0, 100.0)  # how far above the fill the valid logits sit
MASKED_V = 100.0  # exactly representable in every audited format
D, N, S = 64, 4, 80


def _case(ctx, label, q, k, s_valid):
    q4, k4 = q.expand(1, 1, *q.shape), k.expand(1, 1, *k.shape)
    v = ctx.randn(1, 1, S, D, salt=3)
    v[..., s_valid:, :] = MASKED_V
    keep = torch.zeros(1, 1, 1, S, dtype=torch.bool)
    keep[..., :s_valid] = True
    return ctx.check(label, q4, k4, ctx.cast(v)[0], attn_mask=keep)


def run(ctx: ProbeContext) -> list[Case]:
    scale = 1.0 / math.sqrt(D)
    cases = []
    for where in ("raw", "scaled"):
        for fill in FILLS:
            for delta in DELTAS:
                raw = fill + delta if where == "raw" else (fill + delta) / scale
                if not representable(raw * scale, ctx.fmt):
                    continue
                q, k = logits_qk(raw_base=raw, n=N, s=S, d=D, dtype=ctx.dtype, fmt=ctx.fmt)
                cases.append(_case(ctx, f"{where} valid logits {fill:.4g}+{delta:g}", q, k, S // 2))
    # Masked (padding) keys with logits far larger than every valid one.
    u = torch.ones(D, dtype=torch.float64)
    q = u + 0.3 * ctx.randn(N, D, salt=11)
    k = ctx.randn(S, D, salt=12)
    k[S // 2:] = u * (40.0 / (scale * D))  # masked logits ~ +40 scaled, valid ones ~ N(0, 1)
    q, k = ctx.cast(q, k)
    cases.append(_case(ctx, "masked keys with larger logits", q, k, S // 2))
    return cases


PROBE = Probe(
    name="masked-key-leak",
    summary="valid logits just above a finite fill (-1e4, -5e4, -65504); masked V = 100",
    refs=("ohdearquant/lattice#361", "flashinfer-ai/flashinfer#4401"),
    run=run,
)
