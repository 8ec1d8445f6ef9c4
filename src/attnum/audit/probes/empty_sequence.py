"""A decode sequence of length 0 must give the empty-row output the target declares, and write it.

Serving batches carry length-0 sequences (padding slots of CUDA-graph batches, finished requests); the
decode kernel must still write their rows: vLLM's split decode path returns early for L = 0 and leaves
them unwritten (found by attnum on vLLM 0.33.0's ``unified_attention``; vllm-project/vllm#53658 is the
same class, seq_lens past the block table in dummy runs). Cases: L = (0, 16, 32), N = 1 and 3, contiguous
and paged (P = 16, the empty sequence's block-table row pointing at a NaN spare page), one and two splits.
Judged with the decode entry's declared ``empty_rows`` (zeros unless declared); a target that
``accepts_out`` gets poisoned buffers, so rows left unwritten fail as ``unwritten``. (The LSE of an empty
row is ``inf-lse-empty-rows``' business.)
"""

from __future__ import annotations

import math

from attnum.attention.serving.paged import to_pages
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, missing

LENS = (0, 16, 32)  # whole pages: the padding probe owns partial ones


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    cases = []
    for N in (1, 3):
        q, k, v, lens = decode_inputs(ctx, B=3, H=4, G=2, N=N, S=32, d=64, lens=LENS, salt=90 + N)
        kp, table = to_pages(k, 16, cache_seqlens=lens, spare_pages=1, fill=math.nan, seed=N)
        vp, _ = to_pages(v, 16, cache_seqlens=lens, spare_pages=1, fill=math.nan, seed=N)
        for splits in (1, 2):
            cases.append(decode_case(ctx, f"N={N} L={LENS} splits={splits}", q, k, v, cache_seqlens=lens,
                                     num_splits=splits))
            cases.append(decode_case(ctx, f"N={N} L={LENS} paged P=16 splits={splits}", q, k, v, cache_seqlens=lens,
                                     block_table=table, pages=(kp, vp), num_splits=splits))
    return cases


PROBE = Probe(
    name="empty-sequence",
    summary="a length-0 decode sequence: its rows hold the declared empty-row output (and are written)",
    refs=("vllm-project/vllm#53658",),
    run=run,
)
