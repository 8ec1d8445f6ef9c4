"""A moderate float bias added to the scaled scores: S = scale * q.k^T + bias.

SDPA's float ``attn_mask`` (and every relative-position bias: T5, ALiBi, Swin) is added *after* the
softmax scale. Kernels that take a bias sometimes add it before: jax-ml/jax
``jax/experimental/pallas/ops/tpu/flash_attention.py`` computes ``s = q.k^T; s += ab; s *= sm_scale``,
so the bias is shrunk by the scale (1/sqrt(d)). Nothing extreme is needed to see it: a bias of a few
units moves the softmax by O(1). Cases: i.i.d. bias of standard deviation 2 per (B, H, N, S) entry and
broadcast over heads; ALiBi slopes ``-m_h |i - j|`` with ``m_h = 2**(-8 h / H)`` (Press et al. 2022,
h = 1..H), causal and not; an explicit non-default scale. The bias is handed to the kernel in the
audited dtype (as SDPA requires) and golden adds those rounded values in float64.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

B, H, N, S, D = 1, 4, 48, 80, 64  # N != S and neither a tile multiple
BIAS_STD = 2.0
ALIBI_H, ALIBI_N = 8, 96


def alibi(h: int, n: int, s: int) -> torch.Tensor:
    """(1, h, n, s) float64 ALiBi bias -m_h |i - j|, m_h = 2**(-8 (h' + 1) / h) for head h'."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, h + 1, dtype=torch.float64) / h)
    dist = (torch.arange(n, dtype=torch.float64).view(n, 1) - torch.arange(s, dtype=torch.float64).view(1, s)).abs()
    return -(slopes.view(h, 1, 1) * dist).unsqueeze(0)


def run(ctx: ProbeContext) -> list[Case]:
    q, k, v = ctx.cast(ctx.randn(B, H, N, D, salt=1), ctx.randn(B, H, S, D, salt=2), ctx.randn(B, H, S, D, salt=3))
    bias, = ctx.cast(BIAS_STD * ctx.randn(B, H, N, S, salt=4))
    shared, = ctx.cast(BIAS_STD * ctx.randn(1, 1, N, S, salt=5))
    cases = [ctx.check(f"N(0, {BIAS_STD:g}^2) bias (B, H, N, S)", q, k, v, attn_mask=bias),
             ctx.check(f"N(0, {BIAS_STD:g}^2) bias (1, 1, N, S)", q, k, v, attn_mask=shared),
             ctx.check(f"N(0, {BIAS_STD:g}^2) bias, scale=0.3", q, k, v, attn_mask=bias, scale=0.3)]
    q, k, v = ctx.cast(ctx.randn(1, ALIBI_H, ALIBI_N, D, salt=6), ctx.randn(1, ALIBI_H, ALIBI_N, D, salt=7),
                       ctx.randn(1, ALIBI_H, ALIBI_N, D, salt=8))
    slopes, = ctx.cast(alibi(ALIBI_H, ALIBI_N, ALIBI_N))
    cases.append(ctx.check(f"ALiBi H={ALIBI_H} N=S={ALIBI_N}", q, k, v, attn_mask=slopes))
    # Causal ALiBi as models build it (SDPA refuses attn_mask with is_causal): -inf above the diagonal.
    future = torch.ones(ALIBI_N, ALIBI_N, dtype=torch.bool).triu(1)
    cases.append(ctx.check(f"ALiBi H={ALIBI_H} N=S={ALIBI_N} causal (-inf above the diagonal)", q, k, v,
                           attn_mask=slopes.masked_fill(future, float("-inf"))))
    return cases


PROBE = Probe(
    name="float-bias",
    summary="moderate float bias after the scale: N(0, 2^2) per entry and broadcast, ALiBi slopes (causal too)",
    refs=("jax-ml/jax jax/experimental/pallas/ops/tpu/flash_attention.py (bias added before sm_scale)",
          "arXiv 2108.12409 (ALiBi)"),
    run=run,
)
