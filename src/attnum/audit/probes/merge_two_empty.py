"""Two empty states merged must give (0, -inf), never NaN.

Models flashinfer-ai/flashinfer#4051 (open): ``(0, -inf) (+) (0, -inf)`` is NaN in the Triton merges
(``state_merge`` evaluates ``exp2(m - m_max)`` unguarded: -inf - (-inf)) and in the trace references;
open fixes flashinfer-ai/flashinfer#4054 and #5262. vllm-project/vllm#39148: the Triton
``merge_attn_states`` gave NaN when both LSEs were -inf (fixed by clamping the max and adding 1e-10
to the denominator); its test injects ~25% both-empty positions. ring-flash-attention's sigmoid merge
has the same hole.
Merge targets: all rows empty, 25% of rows empty in both states. Decode targets: sequences of length 0
and bottom-right rows with no key (N > L), split 4 ways.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, merge_case, missing_both, state

T, H, DV = 8, 2, 32


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    no_merge, no_decode, neither = missing_both(ctx)
    if neither:
        return [neither]
    if no_merge is None:
        zero = torch.zeros(T, H, DV, dtype=torch.float64)
        cases.append(merge_case(ctx, "every row empty in both", state(zero, float("-inf")), state(zero.clone(),
                                                                                            float("-inf"))))
        a = state(ctx.randn(T, H, DV, salt=1), ctx.randn(T, H, salt=2))
        b = state(ctx.randn(T, H, DV, salt=3), ctx.randn(T, H, salt=4) - 2.0)
        both = (torch.arange(T * H) % 4 == 0).reshape(T, H)  # 25% as vLLM's test
        for s in (a, b):
            s.o[both], s.lse[both] = 0.0, float("-inf")
        cases.append(merge_case(ctx, "25% of rows empty in both", a, b))
    if no_decode is None:
        q, k, v, lens = decode_inputs(ctx, B=3, H=4, G=2, N=3, S=96, d=32, lens=(0, 2, 96), salt=11)
        cases.append(decode_case(ctx, "decode L=0,2,96 N=3 splits=4", q, k, v, cache_seqlens=lens, num_splits=4))
    return cases


PROBE = Probe(
    name="merge-two-empty",
    summary="(0, -inf) (+) (0, -inf) == (0, -inf): all rows and 25% of rows; decode with L = 0 and N > L",
    refs=("flashinfer-ai/flashinfer#4051", "vllm-project/vllm#39148", "flashinfer-ai/flashinfer#5262"),
    run=run,
)
