"""Slots past a sequence's end (the tail of its last page, unused pages) must never reach the output.

Models Dao-AILab/flash-attention#1745 (FA3 propagated NaN from KV-cache padding past ``cache_seqlens``
to the output; FA2 ignored it), Dao-AILab/flash-attention#2374 (FA3/FA4 load V past ``seqused_k`` by TMA:
P = 0 there, but 0 * NaN = NaN in the PV GEMM) and Dao-AILab/flash-attention#1395 (out-of-bounds K tiles
not cleared in shared memory). FlashMLA's tests fill the unused tail of the last page with NaN for this
reason (deepseek-ai/FlashMLA tests/test_flash_mla_dense_decoding.py). Every padding slot and spare page
here is NaN; lengths sit at page boundaries (P - 1, P, P + 1, 1) for P = 16 and 256, contiguous and paged.
"""

from __future__ import annotations

import math

from attnum.attention.serving.paged import to_pages
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, missing

PAGES = (16, 256)


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    cases = []
    for P in PAGES:
        lens = (P - 1, P, P + 1, 1)
        q, k, v, lens_t = decode_inputs(ctx, B=4, H=4, G=2, N=1, S=2 * P, d=64, lens=lens, salt=P, pad=math.nan)
        cases.append(decode_case(ctx, f"contiguous, NaN past L={lens}", q, k, v, cache_seqlens=lens_t, num_splits=2))
        kp, table = to_pages(k, P, cache_seqlens=lens_t, spare_pages=2, seed=P)
        vp, _ = to_pages(v, P, cache_seqlens=lens_t, spare_pages=2, seed=P)
        for splits in (1, 2):
            cases.append(decode_case(ctx, f"paged P={P} L={lens} splits={splits}", q, k, v, cache_seqlens=lens_t,
                                     block_table=table, pages=(kp, vp), num_splits=splits))
    return cases


PROBE = Probe(
    name="page-padding-leak",
    summary="NaN in every slot past L (last-page tail, spare pages); L at page boundaries, P = 16, 256",
    refs=("Dao-AILab/flash-attention#1745", "Dao-AILab/flash-attention#2374", "Dao-AILab/flash-attention#1395"),
    run=run,
)
