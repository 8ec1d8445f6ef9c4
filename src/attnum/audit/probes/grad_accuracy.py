"""Gradient error against float64 autograd on ordinary inputs, with masks, causal and GQA.

Models the calibration side of the catalogue: pytorch/pytorch#103462 (mem-efficient "wrong
gradients" that were within expected low-precision noise) and flash-attn / PyTorch suites' gradient
rules (3x the same-precision error for dq/dk/dv in flash-attn). One causal
case at N = S = 256, a multiple of 128 (backward kernels' tile).
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

B, H, N, S, D = 2, 4, 96, 96, 64
N_TILE = 256


def run(ctx: ProbeContext) -> list[Case]:
    q, k, v = ctx.cast(ctx.randn(B, H, N, D, salt=1), ctx.randn(B, H, S, D, salt=2),
                       ctx.randn(B, H, S, D, salt=3))
    keep = torch.rand(B, 1, N, S, generator=ctx.generator(4)) > 0.3
    keep[..., 0] = True  # no empty rows here; those are grad-fully-masked's job
    cases = [ctx.check_grad("random inputs", q, k, v),
             ctx.check_grad("causal", q, k, v, is_causal=True),
             ctx.check_grad("bool mask (70% kept)", q, k, v, attn_mask=keep)]
    q, k, v = ctx.cast(*(ctx.randn(1, 2, N_TILE, D, salt=s) for s in (5, 6, 7)))
    cases.append(ctx.check_grad(f"N=S={N_TILE} causal", q, k, v, is_causal=True))
    return cases


PROBE = Probe(
    name="grad-accuracy",
    summary="dq/dk/dv vs float64 autograd: random, causal, bool-masked; causal at N = S = 256",
    refs=("pytorch/pytorch#103462",),
    run=run,
    kind="backward",
)
