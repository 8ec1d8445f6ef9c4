"""Backward when a row's log-sum-exp is below -88.7 = -ln(FLT_MAX).

Models pytorch/pytorch#196678 / huggingface/trl#7181 (cuDNN backward NaN dQ: padded keys scored 0
instead of -inf, exp(0 - lse) overflows, inf * 0 = NaN; needs an explicit attn_mask and
seq_len % 128 == 64) and NVIDIA/cudnn-frontend#1072 (Sq = 1, Sk = 128, LSE ~ -122: every dK/dV NaN).
Every logit is about -120; golden is float64 autograd. N = S = 128, 256
(multiples of 128) too: the #196678 trigger is 64 mod 128, the even path is the other branch.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

LOGIT = -120.0
SHAPES = ((1, 128), (64, 64), (192, 192), (128, 128), (256, 256))  # (N, S); 64, 192 = 64 mod 128
D = 64


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    for n, s in SHAPES:
        q = 0.1 * ctx.randn(1, 1, n, D, salt=n)
        k = 0.1 * ctx.randn(1, 1, s, D, salt=s + 1)
        q[..., 0] = 1.0
        k[..., 0] = LOGIT * math.sqrt(D)  # scaled logit ~ -120 for every pair
        v = ctx.randn(1, 1, s, D, salt=s + 2)
        q, k, v = ctx.cast(q, k, v)
        keep = torch.ones(1, 1, n, s, dtype=torch.bool)  # explicit all-True mask, as in #196678
        cases.append(ctx.check_grad(f"N={n} S={s} logits ~{LOGIT:g}", q, k, v, attn_mask=keep))
    return cases


PROBE = Probe(
    name="grad-low-lse",
    summary="backward with every logit ~ -120 (LSE < -88.7), N/S = 1/128, 64, 192, 128, 256",
    refs=("pytorch/pytorch#196678", "huggingface/trl#7181", "NVIDIA/cudnn-frontend#1072"),
    run=run,
    kind="backward",
)
