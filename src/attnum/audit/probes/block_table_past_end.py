"""Block-table entries past a sequence's last page must not be read.

Models vllm-project/vllm#42494 (FA2 paged KV may read stale block-table tail entries) and
vllm-project/vllm#53658 (dummy runs with seq_lens past the block table: an unmasked block-table load read
past the row). An off-by-one in the number of pages (L // P + 1 instead of ceil(L / P)) reads the entry
after the last page exactly when L is a multiple of P; so does a loop bounded by something other than L
(vLLM's unified attention without ``causal`` before vllm-project/vllm PR #47305). Every entry past a
sequence's pages here points at an in-range spare page full of NaN in K alone, then in V alone (an
out-of-range id would crash a real kernel rather than show), for L = P, 2P and 3P (whole pages: no padding
slot to leak from), with P = 16 and 256, one and two splits, and N = 5 queries without ``causal``. Every
sequence has a key: a length-0 sequence (whose output is the declared empty-row value, not the block
table's business) is the ``empty-sequence`` probe's.
"""

from __future__ import annotations

from attnum.attention.serving.paged import to_pages
from attnum.audit.construct import fills, poisons
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, latent, missing

PAGES = (16, 256)


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    cases = []
    for which in poisons(latent(ctx)):
        fk, fv = fills(which)
        for P in PAGES:
            lens = (P, 2 * P, 3 * P)
            modes = ((1, True, 1), (1, True, 2), (5, False, 1)) if P == PAGES[0] else ((1, True, 1),)
            for N, causal, n_splits in modes:
                q, k, v, lens_t = decode_inputs(ctx, B=3, H=4, G=2, N=N, S=4 * P, d=64, lens=lens, salt=3 * P + N)
                kp, table = to_pages(k, P, cache_seqlens=lens_t, spare_pages=1, fill=fk, seed=P)
                vp, _ = to_pages(v, P, cache_seqlens=lens_t, spare_pages=1, fill=fv, seed=P)
                mode = f"N={N} " + ("" if causal else "not causal ") if N > 1 else ""
                cases.append(decode_case(ctx, f"{mode}P={P} L={lens} splits={n_splits}, NaN page in {which}", q, k,
                                         v, cache_seqlens=lens_t, block_table=table, pages=(kp, vp),
                                         num_splits=n_splits, is_causal=causal))
    return cases


PROBE = Probe(
    name="block-table-past-end",
    summary="entries past ceil(L / P) point at a page of NaN in K, then in V; L = P, 2P, 3P for P = 16, 256; "
            "N = 5 not causal",
    refs=("vllm-project/vllm#42494", "vllm-project/vllm#53658", "vllm-project/vllm PR #47305"),
    run=run,
)
