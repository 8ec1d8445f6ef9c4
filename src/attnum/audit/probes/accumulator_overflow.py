"""Long, near-uniform rows with large V: an fp16 accumulator of sum_j p_j v_j overflows.

Models ggml-org/llama.cpp#13975 (Metal FA accumulated the output in F16; gibberish beyond ~32k
context) and ikawrakow/ik_llama.cpp#1196 (NaN perplexity at 64k; fixed by offsetting the running
max). S = 4096 keys, V ~ 60, near-uniform softmax, so the
un-normalised sum reaches ~2.5e5 > 65504 while golden stays ~60.
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext

S, N, D = 4096, 8, 64
V_LEVEL = 60.0


def run(ctx: ProbeContext) -> list[Case]:
    q = 0.05 * ctx.randn(1, 1, N, D, salt=1)  # tiny logits -> near-uniform rows
    k = ctx.randn(1, 1, S, D, salt=2)
    v = V_LEVEL + 10.0 * ctx.randn(1, 1, S, D, salt=3)
    q, k, v = ctx.cast(q, k, v)
    return [ctx.check(f"S={S}, V~{V_LEVEL:g}, near-uniform", q, k, v),
            ctx.check(f"S={S}, V~-{V_LEVEL:g}, near-uniform", q, k, -v)]


PROBE = Probe(
    name="accumulator-overflow",
    summary="S=4096 near-uniform rows, V ~ 60: un-normalised sum above fp16 max",
    refs=("ggml-org/llama.cpp#13975", "ikawrakow/ik_llama.cpp#1196"),
    run=run,
)
