"""Additive masks built from finfo.min and summed in low precision overflow to -inf.

Models huggingface/transformers#17306 (``finfo(fp16).min + (-16) = -inf``; a [pad, token] row became
all -inf, then NaN), huggingface/transformers#27114 (causal + padding masks summed: finfo.min +
finfo.min = -inf) and NVIDIA-NeMo/Automodel#2658 (two bf16 finfo.min planes summed -> NaN grad norm).
The mask handed to the kernel is what HF builds: causal and left-padding
planes, each finfo.min, summed in the audited dtype, so it mixes -inf and finfo.min; some scores are
below -16. Golden adds that mask in float64. A row whose every entry ends up -inf is empty (0);
NaN anywhere fails. The summed planes also run at S = N = 128, an exact tile multiple.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

B, H, S, D = 2, 2, 12, 32
LEFT_PAD = 2
TILE_S = 128


def _summed(ctx: ProbeContext, s: int) -> torch.Tensor:
    fmin = torch.finfo(ctx.dtype).min
    causal = torch.zeros(s, s, dtype=ctx.dtype).masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), fmin)
    padding = torch.zeros(B, 1, 1, s, dtype=ctx.dtype)
    padding[1, ..., :LEFT_PAD] = fmin
    return causal + padding  # in the audited dtype, as HF did: finfo.min + finfo.min = -inf


def run(ctx: ProbeContext) -> list[Case]:
    fmin = torch.finfo(ctx.dtype).min
    q, k, v = ctx.cast(6 * ctx.randn(B, H, S, D, salt=1), ctx.randn(B, H, S, D, salt=2),
                       ctx.randn(B, H, S, D, salt=3))  # scores ~ N(0, 6): many below -16
    cases = [ctx.check("causal + left-padding planes summed", q, k, v, attn_mask=_summed(ctx, S))]
    # A pad query row whose whole mask row is finfo.min, on top of scores below -16.
    row = torch.zeros(B, 1, S, S, dtype=ctx.dtype)
    row[1, :, 0, :] = fmin
    cases.append(ctx.check("finfo.min row over scores < -16", q, k, v, attn_mask=row))
    q, k, v = ctx.cast(6 * ctx.randn(B, H, TILE_S, D, salt=4), ctx.randn(B, H, TILE_S, D, salt=5),
                       ctx.randn(B, H, TILE_S, D, salt=6))
    cases.append(ctx.check(f"planes summed, N=S={TILE_S}", q, k, v, attn_mask=_summed(ctx, TILE_S)))
    return cases


PROBE = Probe(
    name="additive-mask-overflow",
    summary="causal + padding finfo.min planes summed in low precision (-inf entries); also N = S = 128",
    refs=("huggingface/transformers#17306", "huggingface/transformers#27114", "NVIDIA-NeMo/Automodel#2658"),
    run=run,
)
