"""Rows with no key must carry the LSE the target declares for empty states; FA2 writes +inf.

Models Dao-AILab/flash-attention#978 (open): FA2's non-split forward returns lse = +inf for rows with no
key (``csrc/flash_attn/src/softmax.h``: ``Split ? -INFINITY : INFINITY``) while its split partials and
FA3 use -inf, so a downstream merge that expects -inf turns those rows into NaN; Dao-AILab/flash-attention
#1936: FA3's backward padded the LSE with +inf and ring attention's backward went NaN. FlashMLA's test
references also write +inf for "lonely" queries (deepseek-ai/FlashMLA tests/test_flash_mla_dense_decoding.py).
vLLM's ``merge_attn_states`` maps +-inf to -inf to cope. Both conventions are legitimate when declared
(``empty_lse`` on the target); the probe fails a target whose empty rows carry the other one, and a
+inf-convention merge that does not treat +inf as empty.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, merge_case, missing_both, state, unsupported
from attnum.kernels.serving import conventions

T, H, DV = 4, 2, 16


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    no_merge, no_decode, neither = missing_both(ctx)
    if neither:
        return [neither]
    _, empty_lse = conventions(ctx.target)
    if no_decode is None:
        for N in (1, 4):  # N = 1: single-query decode, the common serving case
            q, k, v, lens = decode_inputs(ctx, B=3, H=4, G=2, N=N, S=64, d=32, lens=(0, 2, 64), salt=5 + N)
            for splits in (1, 4):
                cases.append(decode_case(ctx, f"decode N={N} empty rows splits={splits}", q, k, v,
                                         cache_seqlens=lens, num_splits=splits, check_lse=True))
    if no_merge is None:
        if empty_lse == float("inf"):
            live = state(ctx.randn(T, H, DV, salt=1), ctx.randn(T, H, salt=2))
            fa2 = state(torch.zeros(T, H, DV, dtype=torch.float64), float("inf"))
            cases.append(merge_case(ctx, "(0, +inf) + live", fa2, live))
            cases.append(merge_case(ctx, "(0, +inf) + (0, +inf)", fa2, state(fa2.o.clone(), float("inf"))))
        else:
            cases.append(unsupported("merge", "the target declares empty_lse=-inf; +inf states are not its input"))
    return cases


PROBE = Probe(
    name="inf-lse-empty-rows",
    summary="LSE of rows with no key == the declared empty convention (-inf, or FA2's +inf)",
    refs=("Dao-AILab/flash-attention#978", "Dao-AILab/flash-attention#1936",
          "deepseek-ai/FlashMLA tests/test_flash_mla_dense_decoding.py"),
    run=run,
)
