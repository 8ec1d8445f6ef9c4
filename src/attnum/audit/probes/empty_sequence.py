"""A decode sequence of length 0 must give the empty-row output the target declares, and write it.

Serving batches carry length-0 sequences (padding slots of CUDA-graph batches, finished requests); the
decode kernel must still write their rows, and nothing it reads for them may reach any row. vLLM's split
decode path returns early for L = 0 and leaves them unwritten (found by attnum on vLLM 0.33.0's
``unified_attention``; vllm-project/vllm#53658 is the same class, seq_lens past the block table in dummy
runs); vLLM's and SGLang's Triton decode kernels divide by a zero sum there (0 / 0 = NaN:
vllm-project/vllm#57017, PR #57094 open): with a per-tensor FP8 scale after attention, one NaN pad row
poisons the whole batch. Cases: L = (0, 16, 32), N = 1 and 3, contiguous and paged (P = 16, the empty
sequence's block-table row pointing at a spare page), one and two splits; the empty sequence's cache
slots and the spare page hold NaN in K, then in V (an MLA latent: both). Judged with the decode entry's
declared ``empty_rows`` (zeros unless declared); a target that ``accepts_out`` gets poisoned buffers, so
rows left unwritten fail as ``unwritten``. (The LSE of an empty row is ``inf-lse-empty-rows``' business.)
"""

from __future__ import annotations

from attnum.attention.serving.paged import to_pages
from attnum.audit.construct import fills, poisons
from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, latent, missing

LENS = (0, 16, 32)  # whole pages: the padding probe owns partial ones
MODES = ((1, False, 1), (1, True, 1), (1, True, 2), (3, True, 1))  # (N, paged, splits)


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    cases = []
    for which in poisons(latent(ctx)):
        fk, fv = fills(which)
        for N, paged, n_splits in MODES:
            q, k, v, lens = decode_inputs(ctx, B=3, H=4, G=2, N=N, S=32, d=64, lens=LENS, salt=90 + N, pad=fk,
                                          pad_v=fv)
            tag = f"N={N} L={LENS}" + (" paged P=16" if paged else "") + f" splits={n_splits}, NaN in {which}"
            if not paged:
                cases.append(decode_case(ctx, tag, q, k, v, cache_seqlens=lens, num_splits=n_splits))
                continue
            kp, table = to_pages(k, 16, cache_seqlens=lens, spare_pages=1, fill=fk, seed=N)
            vp, _ = to_pages(v, 16, cache_seqlens=lens, spare_pages=1, fill=fv, seed=N)
            cases.append(decode_case(ctx, tag, q, k, v, cache_seqlens=lens, block_table=table, pages=(kp, vp),
                                     num_splits=n_splits))
    return cases


PROBE = Probe(
    name="empty-sequence",
    summary="a length-0 decode sequence (its slots NaN in K, then in V): its rows hold the declared empty-row "
            "output, written",
    refs=("vllm-project/vllm#53658", "vllm-project/vllm#57017"),
    run=run,
)
