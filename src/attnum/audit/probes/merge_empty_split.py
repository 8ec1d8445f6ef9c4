"""An empty split (LSE -inf, O 0) merged with a live one must give the live one.

Models flashinfer-ai/flashinfer#4401: before it, the split-KV ``state_t::merge`` and ``MergeStateKernel``
ran on the finite -5e4 sentinel, so a live state whose LSE lay below the sentinel lost to an empty one
(flashinfer-ai/flashinfer#4450, #4451); the fix clamps every exponent difference and guards
``d_sum > 0``. FA3's combine test sets half of the splits to lse = -inf for a third of the batch
(Dao-AILab/flash-attention hopper/test_flash_attn.py::test_flash_attn_combine), and flash-decoding
makes empty splits whenever a short sequence runs under a long host ``max_seqlen``.
Merge targets: empty (+) live in both orders, live LSEs from +80 down to -2.45e5 (below the sentinel),
rows mixing both. Decode targets: short sequences with 8 splits under max_seqlen 1024.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, merge_case, missing_both, state

T, H, DV = 6, 2, 64
LIVE_LSES = (0.0, 80.0, -1e4, -6e4, -2.45e5)  # in the target's declared base


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    no_merge, no_decode, neither = missing_both(ctx)
    if neither:
        return [neither]
    if no_merge is None:
        empty = state(torch.zeros(T, H, DV, dtype=torch.float64), float("-inf"))
        for i, lse in enumerate(LIVE_LSES):
            live = state(ctx.randn(T, H, DV, salt=i), lse + 0.25 * ctx.randn(T, H, salt=50 + i))
            cases.append(merge_case(ctx, f"empty+live lse~{lse:g}", empty, live))
            cases.append(merge_case(ctx, f"live+empty lse~{lse:g}", live, empty))
        # Rows mixing the two: row t is empty in a when t is even, in b when t is odd.
        a = state(ctx.randn(T, H, DV, salt=90), -6e4 + ctx.randn(T, H, salt=91))
        b = state(ctx.randn(T, H, DV, salt=92), 3.0 + ctx.randn(T, H, salt=93))
        rows = torch.arange(T) % 2 == 0
        a.o[rows], a.lse[rows], b.o[~rows], b.lse[~rows] = 0.0, float("-inf"), 0.0, float("-inf")
        cases.append(merge_case(ctx, "rows empty in a or in b", a, b))
    if no_decode is None:
        lens = (5, 129, 1)
        q, k, v, lens_t = decode_inputs(ctx, B=3, H=4, G=2, N=1, S=1024, d=64, lens=lens, salt=7)
        cases.append(decode_case(ctx, "decode L=5,129,1 splits=8 max_seqlen=1024", q, k, v, cache_seqlens=lens_t,
                                 num_splits=8, max_seqlen=1024))
    return cases


PROBE = Probe(
    name="merge-empty-split",
    summary="empty split (0, -inf) merged with a live state, LSEs +80 .. -2.45e5; decode with empty splits",
    refs=("flashinfer-ai/flashinfer#4401", "flashinfer-ai/flashinfer#4450", "Dao-AILab/flash-attention "
          "hopper/test_flash_attn.py::test_flash_attn_combine"),
    run=run,
)
