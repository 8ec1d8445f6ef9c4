"""Long rows: 8192 keys, where deviation grows with length and tiled merges happen many times.

Models the length dependence the paper measures (arXiv 2405.02803 Fig. 5) and long-context failures
such as ggml-org/llama.cpp#13975 and pytorch/pytorch#162588 (attn_mask accuracy at very long
sequences). Includes a decode-shaped row (N = 1) and a padded
batch element.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

S, D = 8192, 64


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    for n in (1, 16):
        q, k, v = ctx.cast(ctx.randn(1, 2, n, D, salt=n), ctx.randn(1, 2, S, D, salt=2),
                           ctx.randn(1, 2, S, D, salt=3))
        cases.append(ctx.check(f"N={n} S={S}", q, k, v))
    keep = torch.ones(1, 1, 1, S, dtype=torch.bool)
    keep[..., S - 1000:] = False  # right padding, not a tile multiple
    cases.append(ctx.check(f"N=16 S={S} padded", q, k, v, attn_mask=keep))
    return cases


PROBE = Probe(
    name="long-sequence",
    summary="S = 8192 keys (N = 1, 16; with padding)",
    refs=("ggml-org/llama.cpp#13975", "pytorch/pytorch#162588"),
    run=run,
)
