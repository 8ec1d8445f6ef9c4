"""A decode's output must not depend on ``num_splits`` or on the host's ``max_seqlen`` (behaviour).

Models flashinfer-ai/flashinfer#4647: ``trtllm_batch_decode_with_kv_cache`` changed its output when only
the host ``max_seq_len`` changed, because that value drives the KV-split factor (a 253-token sequence got
a 19-way split), so eager and CUDA-graph runs were not bit-exact (documented in
flashinfer-ai/flashinfer#5180); Dao-AILab/flash-attention#1647 (``num_splits`` changes bf16 results) and
#1570 (FA3 varlen kvcache not batch-invariant). Each split count and host bound is compared bit for bit
with ``num_splits=1``; differing bits are a note (a fail under --strict), as batch-invariance. Every
result is also judged against golden, so invariance cannot be met by a constant.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, missing
from attnum.audit.verdict import Verdict

LENS = (253, 1000, 31)
CONFIGS = ((1, None), (2, None), (3, None), (8, None), (8, 4096), (19, 4096))  # (num_splits, max_seqlen)


def run(ctx: ProbeContext) -> list[Case]:
    no_decode = missing(ctx, "decode")
    if no_decode:
        return [no_decode]
    bctx = ctx.as_behaviour()
    q, k, v, lens = decode_inputs(ctx, B=3, H=4, G=1, N=1, S=1000, d=64, lens=LENS, salt=17)
    cases, outs = [], []
    for splits, host in CONFIGS:
        label = f"splits={splits} max_seqlen={host or 'S'}"
        before = len(outs)
        cases.append(decode_case(ctx, label, q, k, v, cache_seqlens=lens, num_splits=splits, max_seqlen=host,
                                 out=outs))
        if before and len(outs) > before:  # compare with the first configuration that ran
            diff = float((outs[-1] - outs[0]).abs().nan_to_num(nan=math.inf).max())
            same = bool(torch.equal(outs[-1], outs[0]))
            verdict = Verdict(status="pass" if same else "fail", target_error=diff, baseline_error=0.0, bound=0.0,
                              note="" if same else "output bits change with the split")
            cases.append(bctx.finish(f"{label} vs the first, bitwise", verdict))
    return cases


PROBE = Probe(
    name="split-invariance",
    summary="decode output bitwise independent of num_splits and host max_seqlen (behaviour)",
    refs=("flashinfer-ai/flashinfer#4647", "Dao-AILab/flash-attention#1647", "Dao-AILab/flash-attention#1570"),
    run=run,
    kind="behaviour",
)
