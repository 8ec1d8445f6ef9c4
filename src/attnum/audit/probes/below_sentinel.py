"""Rows whose every logit lies below a finite "minus infinity" sentinel.

Models flashinfer-ai/flashinfer#4267 / #4450 / #4451 (fixed by #4401): ``math::inf`` was the finite
5e4; the running max started at ``-5e4`` and a row whose raw logits were all below it never raised
the max, so the "row is empty" guard fired and the row came out as zeros (LSE = the sentinel). Real
trigger: a bf16 GQA model with massive activations, raw logits near -2.45e5. The threshold was on
the raw logit in prefill and on the scaled logit in decode, so both are probed. Each row has one
key far above the rest (a unique argmax), so golden is that key's V row and a zero row is plainly
wrong. FlashInfer's -5e4 (raw) also runs at N = S = 64, 128, 256,
exact tile multiples; there the 4 constructed rows repeat down the N axis.
"""

from __future__ import annotations

import math

from attnum.audit.construct import logits_qk, representable
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.verdict import ulp

SENTINELS = (-1e4, -5e4, -6e4, -2.45e5, -5.24288e5)  # FlashInfer #4401's regression sweep
D = 128  # head dim of the reports
N, S = 4, 97  # S not a tile multiple, so the argmax can sit in a ragged last tile
ARGMAX_MARGIN = 16.0  # scaled units: the other 96 keys weigh exp(-16) * 96 ~ 1e-5 together
TILE_LENGTHS = (64, 128, 256)
TILE_SENTINEL = -5e4  # flashinfer#4267's own value


def run(ctx: ProbeContext) -> list[Case]:
    scale = 1.0 / math.sqrt(D)
    cases = []
    for where in ("raw", "scaled"):
        for t in SENTINELS:
            raw = t if where == "raw" else t / scale
            if not representable(raw * scale, ctx.fmt):
                continue  # a score this size cannot exist in the format; nothing to probe
            # The gap must survive the scores being rounded to the format at this magnitude.
            gap = (ARGMAX_MARGIN + 4 * ulp(ctx.fmt, raw * scale)) / scale
            picks = tuple((i, (37 * i + 5) % S if i else S - 1, gap) for i in range(N))
            q, k = logits_qk(raw_base=raw, n=N, s=S, d=D, dtype=ctx.dtype, fmt=ctx.fmt, picks=picks)
            v = ctx.cast(ctx.randn(1, 2, S, D, salt=int(-t)))[0]
            q4, k4 = q.expand(1, 2, N, D), k.expand(1, 2, S, D)
            cases.append(ctx.check(f"{where} logits {t:.4g}", q4, k4, v))
    for n in TILE_LENGTHS:
        raw = TILE_SENTINEL
        gap = (ARGMAX_MARGIN + 4 * ulp(ctx.fmt, raw * scale)) / scale
        picks = tuple((i, (37 * i + 5) % n if i else n - 1, gap) for i in range(N))
        q, k = logits_qk(raw_base=raw, n=N, s=n, d=D, dtype=ctx.dtype, fmt=ctx.fmt, picks=picks)
        v = ctx.cast(ctx.randn(1, 2, n, D, salt=n))[0]
        qn, kn = q.repeat(n // N, 1).expand(1, 2, n, D), k.expand(1, 2, n, D)
        cases.append(ctx.check(f"raw logits {raw:.4g} N=S={n}", qn, kn, v))
    return cases


PROBE = Probe(
    name="below-sentinel",
    summary="all logits of a row below -1e4 ... -5.24e5 (raw and scaled), unique argmax; -5e4 at N = S = 64, 128, 256",
    refs=("flashinfer-ai/flashinfer#4267", "flashinfer-ai/flashinfer#4450", "flashinfer-ai/flashinfer#4451",
          "flashinfer-ai/flashinfer#4401"),
    run=run,
)
