"""Grouped-query attention: query head h must read kv head h // (H // G) (``enable_gqa=True``).

Models pytorch/pytorch#193893 (cuDNN SDPA silently corrupting generation only for models with
num_key_value_heads < 8; no mechanism identified) and flashinfer-ai/flashinfer#4267, whose real
trigger was a GQA model. A kernel that maps
heads with h % G, or ignores the group size, mixes up distinct kv heads and fails golden.
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext

H = 8
GROUPS = (8, 4, 2, 1)  # kv heads G: MHA, group sizes 2, 4 and MQA
N, S, D = 12, 40, 32


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    for g in GROUPS:
        q, k, v = ctx.cast(ctx.randn(2, H, N, D, salt=g), ctx.randn(2, g, S, D, salt=10 + g),
                           ctx.randn(2, g, S, D, salt=20 + g))
        cases.append(ctx.check(f"H={H} G={g}", q, k, v, enable_gqa=True))
        cases.append(ctx.check(f"H={H} G={g} causal", q, k[..., :N, :], v[..., :N, :], is_causal=True,
                               enable_gqa=True))
        # Decode shape: one query per head against the whole cache (GQA decode packs heads as rows).
        cases.append(ctx.check(f"H={H} G={g} decode N=1", q[..., :1, :], k, v, enable_gqa=True))
    return cases


PROBE = Probe(
    name="gqa-mapping",
    summary="enable_gqa with H=8 and G=8, 4, 2, 1 kv heads; N = 12 and N = 1 (decode)",
    refs=("pytorch/pytorch#193893", "flashinfer-ai/flashinfer#4267"),
    run=run,
)
