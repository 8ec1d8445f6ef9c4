"""Scaled logits above 88.7 = ln(FLT_MAX): exp() overflows unless the row max is subtracted first.

Models the un-stabilised softmax that the online-softmax running max exists to prevent (lecture §3 of
the brief; huggingface/transformers#17437 "OPT - Fix Softmax NaN in half precision mode", whose fix
upcasts the softmax). Logits sit at ~100 and ~1000 with a
spread of a few units, so golden is a genuine softmax; a kernel that exponentiates without the max
produces inf/inf = NaN. Logits ~1000 also run at N = S = 64, 128, 256 (exact tile multiples: the
unmasked "even" path of tiled kernels).
"""

from __future__ import annotations

import math

from attnum.audit.harness import Case, Probe, ProbeContext

LEVELS = (100.0, 1000.0)  # scaled logits; exp(100) and exp(1000) overflow float32
D, N, S = 64, 8, 72
TILE_LENGTHS = (64, 128, 256)


def run(ctx: ProbeContext) -> list[Case]:
    scale = 1.0 / math.sqrt(D)
    cases = []
    for level in LEVELS:
        q = ctx.randn(1, 2, N, D, salt=1)
        k = ctx.randn(1, 2, S, D, salt=2)
        q[..., 0] = 16.0
        k[..., 0] = level / (16.0 * scale)  # base logit, plus a N(0, ~1) spread from the rest
        v = ctx.randn(1, 2, S, D, salt=3)
        q, k, v = ctx.cast(q, k, v)
        cases.append(ctx.check(f"scaled logits ~{level:g}", q, k, v))
        cases.append(ctx.check(f"scaled logits ~{level:g} causal", q, k[..., :N, :], v[..., :N, :],
                               is_causal=True))
    level = LEVELS[-1]
    for n in TILE_LENGTHS:
        q, k = ctx.randn(1, 2, n, D, salt=n + 1), ctx.randn(1, 2, n, D, salt=n + 2)
        q[..., 0] = 16.0
        k[..., 0] = level / (16.0 * scale)
        q, k, v = ctx.cast(q, k, ctx.randn(1, 2, n, D, salt=n + 3))
        for causal in (False, True):
            cases.append(ctx.check(f"scaled logits ~{level:g} N=S={n} causal={causal}", q, k, v, is_causal=causal))
    return cases


PROBE = Probe(
    name="exp-overflow",
    summary="scaled logits ~100 and ~1000 (exp overflows float32 without max subtraction); N = S = 64, 128, 256",
    refs=("huggingface/transformers#17437",),
    run=run,
)
