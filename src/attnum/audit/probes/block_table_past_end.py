"""Block-table entries past a sequence's last page must not be read.

Models vllm-project/vllm#42494 (FA2 paged KV may read stale block-table tail entries) and
vllm-project/vllm#53658 (dummy runs with seq_lens past the block table: an unmasked block-table load read
past the row). An off-by-one in the number of pages (L // P + 1 instead of ceil(L / P)) reads the entry
after the last page exactly when L is a multiple of P. Every entry past a sequence's pages here points at
an in-range spare page full of NaN (an out-of-range id would crash a real kernel rather than show), for
L = P, 2P and 3P (whole pages: no padding slot to leak from), with P = 16 and 256, one and two
splits. Every sequence has a key: a length-0 sequence (whose output is the declared empty-row value,
not the block table's business) is the ``empty-sequence`` probe's.
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
        lens = (P, 2 * P, 3 * P)
        q, k, v, lens_t = decode_inputs(ctx, B=3, H=4, G=2, N=1, S=4 * P, d=64, lens=lens, salt=3 * P)
        kp, table = to_pages(k, P, cache_seqlens=lens_t, spare_pages=1, fill=math.nan, seed=P)
        vp, _ = to_pages(v, P, cache_seqlens=lens_t, spare_pages=1, fill=math.nan, seed=P)
        for splits in (1, 2):
            cases.append(decode_case(ctx, f"P={P} L={lens} splits={splits}", q, k, v, cache_seqlens=lens_t,
                                     block_table=table, pages=(kp, vp), num_splits=splits))
    return cases


PROBE = Probe(
    name="block-table-past-end",
    summary="entries past ceil(L / P) point at a NaN page; L = P, 2P, 3P for P = 16, 256",
    refs=("vllm-project/vllm#42494", "vllm-project/vllm#53658"),
    run=run,
)
