"""The ``scale`` argument must be honoured (and ``None`` must mean 1/sqrt(d)).

Models kernels that hard-code 1/sqrt(d) or read the scale in the wrong place: PaddlePaddle/Paddle#41933
and philipturner/metal-flash-attention#8 (the scale applied at a different step than assumed), and
the FlashInfer decode path of flashinfer-ai/flashinfer#4450, where sm_scale * log2(e) is folded into
the logits. Golden applies the requested scale in float64.
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext

SCALES = (None, 1.0, 0.05, 0.3535, 2.0)
B, H, N, S, D = 1, 2, 16, 48, 32


def run(ctx: ProbeContext) -> list[Case]:
    q, k, v = ctx.cast(ctx.randn(B, H, N, D, salt=1), ctx.randn(B, H, S, D, salt=2),
                       ctx.randn(B, H, S, D, salt=3))
    return [ctx.check(f"scale={s}", q, k, v, scale=s) for s in SCALES] + [
        ctx.check("scale=0.05 causal", q, k[..., :N, :], v[..., :N, :], scale=0.05, is_causal=True)]


PROBE = Probe(
    name="scale-argument",
    summary="scale = None, 1.0, 0.05, 0.3535, 2.0 honoured",
    refs=("PaddlePaddle/Paddle#41933", "flashinfer-ai/flashinfer#4450"),
    run=run,
)
