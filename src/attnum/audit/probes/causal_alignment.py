"""``is_causal`` with q_len != k_len: which diagonal does the target keep?

Models Dao-AILab/flash-attention#951 / #517 (flash-attn 2.1 moved causal from top-left to
bottom-right), pytorch/pytorch#108108 / #110144 (SDPA's is_causal is top-left; users expected
bottom-right with a KV cache) and flashinfer-ai/flashinfer#4452 (bottom-right with q_len > k_len
leaves empty rows). research/edge-cases.md §2.5. Both alignments are legitimate; the probe reports
which one the target implements and fails when it matches neither, or switches between them.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

SHAPES = ((2, 5), (5, 2), (1, 7), (7, 7), (3, 70))  # (N, S)
H, D = 2, 32


def bottom_right(n: int, s: int) -> torch.Tensor:
    """Keep key j for query i iff j <= i + (s - n) (flash-attn >= 2.1)."""
    return torch.ones(n, s, dtype=torch.bool).tril(diagonal=s - n)


def run(ctx: ProbeContext) -> list[Case]:
    cases, seen = [], set()
    for n, s in SHAPES:
        q, k, v = ctx.cast(ctx.randn(1, H, n, D, salt=n), ctx.randn(1, H, s, D, salt=100 + s),
                           ctx.randn(1, H, s, D, salt=200 + s))
        out = ctx.call(q, k, v, is_causal=True)
        tl = ctx.check(f"{n}x{s} top-left", q, k, v, is_causal=True, out=out)
        br = ctx.check(f"{n}x{s} bottom-right", q, k, v, attn_mask=bottom_right(n, s), out=out)
        if n == s:
            cases.append(tl)
            continue
        if tl.verdict.status == "pass":
            seen.add("top-left")
            cases.append(replace(tl, verdict=replace(tl.verdict, note="top-left (torch SDPA)")))
        elif br.verdict.status == "pass":
            seen.add("bottom-right")
            cases.append(replace(br, verdict=replace(br.verdict, note="bottom-right (flash-attn >= 2.1)")))
        else:
            best = min((tl, br), key=lambda c: c.verdict.ratio)
            note = "matches neither top-left nor bottom-right causal alignment"
            cases.append(replace(best, verdict=replace(best.verdict, status="fail", note=note)))
    if len(seen) > 1:
        last = cases[-1]
        cases.append(replace(last, label="alignment consistency",
                             verdict=replace(last.verdict, status="fail",
                                             note="top-left for some shapes, bottom-right for others")))
    return cases


PROBE = Probe(
    name="causal-alignment",
    summary="is_causal with q_len != k_len: top-left (torch) or bottom-right (flash-attn >= 2.1)",
    refs=("Dao-AILab/flash-attention#951", "pytorch/pytorch#108108", "flashinfer-ai/flashinfer#4452"),
    run=run,
)
