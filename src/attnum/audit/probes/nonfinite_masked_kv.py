"""NaN / Inf / 1e30 planted in masked-out K or V rows.

Models pytorch/pytorch#101967 (SDPA returns NaN when a masked-out key holds NaN; 1e10 there is
harmless) and vllm-project/vllm#53628 (stale KV-cache blocks with non-finite values leak through
``0 * NaN`` when masking happens after the math). Golden is the output
for the same inputs with the masked rows zeroed, i.e. "the mask is structural". torch itself
propagates NaN here, so this is reported as behaviour and fails only under --strict.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

N, S, D = 8, 24, 32
MASKED = (5, S - 1)  # key positions every query masks


def run(ctx: ProbeContext) -> list[Case]:
    ctx = ctx.as_behaviour()
    q, k, v = ctx.cast(ctx.randn(1, 2, N, D, salt=1), ctx.randn(1, 2, S, D, salt=2),
                       ctx.randn(1, 2, S, D, salt=3))
    keep = torch.ones(1, 1, 1, S, dtype=torch.bool)
    keep[..., list(MASKED)] = False
    clean_k, clean_v = k.clone(), v.clone()
    clean_k[..., list(MASKED), :] = 0
    clean_v[..., list(MASKED), :] = 0
    big = min(1e30, torch.finfo(ctx.dtype).max)  # 1e30 is +inf in fp16; use its max there
    cases = []
    for what, val in (("NaN", float("nan")), ("+Inf", float("inf")), ("-Inf", float("-inf")), ("big", big)):
        for which in ("K", "V"):
            kk, vv = clean_k.clone(), clean_v.clone()
            (kk if which == "K" else vv)[..., list(MASKED), :] = val
            cases.append(ctx.check(f"{what} in masked {which}", q, kk, vv, attn_mask=keep,
                                   clean=(q, clean_k, clean_v)))
    return cases


PROBE = Probe(
    name="nonfinite-masked-kv",
    summary="NaN/Inf/1e30 in masked-out K or V (behaviour; fails under --strict)",
    refs=("pytorch/pytorch#101967", "vllm-project/vllm#53628"),
    run=run,
    kind="behaviour",
)
