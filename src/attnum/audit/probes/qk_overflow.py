"""Raw q.k products above fp16's max (65504) while the scaled logits stay moderate.

Models PaddlePaddle/Paddle#41933 (cuBLAS applied the softmax scale after an fp16 product: inf, then
NaN), philipturner/metal-flash-attention#8, ultralytics/ultralytics#24990 and pytorch/pytorch#60939.
d = 192, q = 5, k ~ 70 gives raw 67200 > 65504 but a scaled logit near
4850; golden is finite, so inf/NaN fails. Keys differ by one fp16 step of k so the softmax is not
flat. In bf16/fp32 the same inputs are harmless and must stay so. The first configuration also runs at
N = S = 64, 128, 256: exact tile multiples, where kernels take their unmasked "even" path.
With raw products this large the order of the q . k sum (scale before or after the dot, blocking) moves
each score by ~ sqrt(d) u_fp32 s |q| . |k|: the bound allows that (``score_order``: the score-side terms,
as the gradient probes' dS terms), so a kernel that scales after the dot, as FA2 does, is not failed for
its order.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

# (d, q value, k value): raw = d * q * k > 65504. Head dims whose 1/sqrt(d) is not a power of two,
# and a small jitter on q, so that no reference computes these logits exactly by accident.
CONFIGS = ((192, 5.0, 70.0), (96, 8.0, 90.0))
N, S = 4, 40
K_STEP = 0.0625  # one fp16 ulp at 64..128
TILE_LENGTHS = (64, 128, 256)  # N = S at exact tile multiples (no ragged tile anywhere)


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    for d, qv, kv in CONFIGS:
        q = qv * (1 + 1e-3 * ctx.randn(1, 1, N, d, salt=d + 1))
        k = kv + K_STEP * (torch.arange(S, dtype=torch.float64) % 5).view(1, 1, S, 1).expand(1, 1, S, d)
        v = ctx.randn(1, 1, S, d, salt=d)
        q, k, v = ctx.cast(q, k, v)
        raw = float(q.double()[0, 0, 0] @ k.double()[0, 0, 0])
        cases.append(ctx.check(f"d={d} raw q.k={raw:.0f}", q, k, v, score_order=True))
        cases.append(ctx.check(f"d={d} raw q.k={raw:.0f} causal", q, k[..., :N, :], v[..., :N, :],
                               is_causal=True, score_order=True))
    d, qv, kv = CONFIGS[0]
    for n in TILE_LENGTHS:
        q = qv * (1 + 1e-3 * ctx.randn(1, 1, n, d, salt=n + 1))
        k = kv + K_STEP * (torch.arange(n, dtype=torch.float64) % 5).view(1, 1, n, 1).expand(1, 1, n, d)
        q, k, v = ctx.cast(q, k, ctx.randn(1, 1, n, d, salt=n))
        for causal in (False, True):
            cases.append(ctx.check(f"d={d} N=S={n} causal={causal}", q, k, v, is_causal=causal, score_order=True))
    return cases


PROBE = Probe(
    name="qk-overflow",
    summary="raw q.k above 65504 before scaling, moderate scaled logits; also N = S = 64, 128, 256",
    refs=("PaddlePaddle/Paddle#41933", "philipturner/metal-flash-attention#8", "ultralytics/ultralytics#24990"),
    run=run,
)
