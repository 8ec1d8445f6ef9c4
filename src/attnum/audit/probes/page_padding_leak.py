"""Slots past a sequence's end (the tail of its last page, unused pages) must never reach the output.

Models Dao-AILab/flash-attention#1745 (FA3 propagated NaN from KV-cache padding past ``cache_seqlens``
to the output; FA2 ignored it), Dao-AILab/flash-attention#2374 (FA3/FA4 load V past ``seqused_k`` by TMA:
P = 0 there, but 0 * NaN = NaN in the PV GEMM), Dao-AILab/flash-attention#1395 (out-of-bounds K tiles
not cleared in shared memory) and vllm-project/vllm PR #47305 (vLLM's unified attention with
``causal=False`` looped to the end of the last page: the slots past ``seq_len`` were loaded and 0 * NaN
reached every row; fixed in vLLM 0.25). FlashMLA's tests fill the unused tail of the last page with NaN for
this reason (deepseek-ai/FlashMLA tests/test_flash_mla_dense_decoding.py).

Every padding slot and spare page holds NaN, in K alone and then in V alone (a kernel that masks one load
and not the other is caught where the NaN gets through; an MLA latent is both at once). Lengths sit at page
boundaries (P - 1, P, P + 1, 1) for P = 16 and 256, contiguous and paged, one and two splits; then N = 5
queries, causal and not (chunked prefill, cross-attention), with one sequence of exactly N keys (query
length = key length = 5, no context: the vLLM case). The padding is dead memory in every mode: a NaN
there that reaches any output row fails.
"""

from __future__ import annotations

from attnum.attention.serving.paged import to_pages
from attnum.audit.construct import fills, poisons
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, latent, missing

PAGES = (16, 256)
MULTI = (5, (15, 16, 17, 5))  # (N, lengths) of the multi-query cases, P = 16


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    cases = []
    for which in poisons(latent(ctx)):
        fk, fv = fills(which)
        for P in PAGES:
            lens = (P - 1, P, P + 1, 1)
            q, k, v, lens_t = decode_inputs(ctx, B=4, H=4, G=2, N=1, S=2 * P, d=64, lens=lens, salt=P, pad=fk,
                                            pad_v=fv)
            kp, table = to_pages(k, P, cache_seqlens=lens_t, spare_pages=2, fill=fk, seed=P)
            vp, _ = to_pages(v, P, cache_seqlens=lens_t, spare_pages=2, fill=fv, seed=P)
            tag = f"NaN in {which} past L={lens}"
            if P == PAGES[0]:
                cases.append(decode_case(ctx, f"contiguous, {tag}", q, k, v, cache_seqlens=lens_t, num_splits=2))
            for n_splits in (1, 2) if P == PAGES[0] else (1,):
                cases.append(decode_case(ctx, f"paged P={P}, {tag}, splits={n_splits}", q, k, v, cache_seqlens=lens_t,
                                         block_table=table, pages=(kp, vp), num_splits=n_splits))
        N, lens = MULTI
        q, k, v, lens_t = decode_inputs(ctx, B=4, H=4, G=2, N=N, S=32, d=64, lens=lens, salt=77, pad=fk, pad_v=fv)
        kp, table = to_pages(k, 16, cache_seqlens=lens_t, spare_pages=2, fill=fk, seed=5)
        vp, _ = to_pages(v, 16, cache_seqlens=lens_t, spare_pages=2, fill=fv, seed=5)
        for causal in (True, False):
            mode = "causal" if causal else "not causal"
            cases.append(decode_case(ctx, f"N={N} {mode}, paged P=16, NaN in {which} past L={lens}", q, k, v,
                                     cache_seqlens=lens_t, block_table=table, pages=(kp, vp), is_causal=causal))
    return cases


PROBE = Probe(
    name="page-padding-leak",
    summary="NaN in K, then in V, in every slot past L (last-page tail, spare pages); P = 16, 256; N = 1 and 5, "
            "causal and not",
    refs=("Dao-AILab/flash-attention#1745", "Dao-AILab/flash-attention#2374", "Dao-AILab/flash-attention#1395",
          "vllm-project/vllm PR #47305"),
    run=run,
)
