"""``is_causal`` with q_len != k_len: which diagonal does the target keep?

Models Dao-AILab/flash-attention#951 / #517 (flash-attn 2.1 moved causal from top-left to
bottom-right), pytorch/pytorch#108108 / #110144 (SDPA's is_causal is top-left; users expected
bottom-right with a KV cache) and flashinfer-ai/flashinfer#4452 (bottom-right with q_len > k_len
leaves empty rows). Both alignments are legitimate; the target declares
one (attnum.kernels.conventions: an adapter's field, ``fn.attnum_causal_alignment``, or
``--causal-alignment``; undeclared = SDPA's top-left). The probe passes the declared one, reported as
a note, and fails the other one (naming it) or a match of neither (an off-by-one diagonal).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.kernels.conventions import label as spelled

SHAPES = ((2, 5), (5, 2), (1, 7), (7, 7), (3, 70))  # (N, S)
H, D = 2, 32
WHO = {"top_left": "torch SDPA", "bottom_right": "flash-attn >= 2.1, FlashInfer"}


def bottom_right(n: int, s: int) -> torch.Tensor:
    """Keep key j for query i iff j <= i + (s - n) (flash-attn >= 2.1)."""
    return torch.ones(n, s, dtype=torch.bool).tril(diagonal=s - n)


def run(ctx: ProbeContext) -> list[Case]:
    declared = ctx.causal_alignment
    other = "top_left" if declared == "bottom_right" else "bottom_right"
    octx = replace(ctx, causal_alignment=other, monitor=None)
    cases = []
    for n, s in SHAPES:
        q, k, v = ctx.cast(ctx.randn(1, H, n, D, salt=n), ctx.randn(1, H, s, D, salt=100 + s),
                           ctx.randn(1, H, s, D, salt=200 + s))
        label = f"{n}x{s} {spelled(declared)}"
        out = ctx.call(q, k, v, is_causal=True, label=label)
        mine = ctx.check(label, q, k, v, is_causal=True, out=out)
        if n == s or mine.verdict.status != "fail":
            note = "" if n == s else f"{spelled(declared)} as declared ({WHO[declared]})"
            cases.append(replace(mine, verdict=replace(mine.verdict, note=note)) if note else mine)
            continue
        theirs = octx.check(f"{n}x{s} {spelled(other)}", q, k, v, is_causal=True, out=out)
        if theirs.verdict.status == "pass":
            note = (f"{spelled(other)} ({WHO[other]}), but {spelled(declared)} is declared: declare "
                    f"fn.attnum_causal_alignment = {other!r} or pass --causal-alignment {spelled(other)}")
        else:
            note = "matches neither top-left nor bottom-right causal alignment"
        cases.append(replace(mine, verdict=replace(mine.verdict, status="fail", note=note)))
    return cases


PROBE = Probe(
    name="causal-alignment",
    summary="is_causal with q_len != k_len follows the declared alignment (top-left: torch; bottom-right: flash-attn)",
    refs=("Dao-AILab/flash-attention#951", "pytorch/pytorch#108108", "flashinfer-ai/flashinfer#4452"),
    run=run,
)
