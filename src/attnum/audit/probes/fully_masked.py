"""Rows with nothing to attend to: the output must follow the declared convention (torch >= 2.5: 0).

Models pytorch/pytorch#103749 / #103963 (SDPA NaN for all-False bool rows, fixed by _safe_softmax in
#131060 / #131863 / #133882 for the 2.5 line), huggingface/transformers#26572 / #29318 / #38690 and
unslothai/unsloth#9848 (left padding x causal gives empty rows; NaN on some backends), pytorch/pytorch
#109517 / #110213 (finfo.min rows: finite on CPU, NaN on the mem-efficient kernel) and
Dao-AILab/flash-attention#978 (zero-length K/V).

The expected output of an empty row is the declared convention (ctx.empty_rows: zeros, NaN, the
mean of V, or "any" = not compared), named in each passing case's note. A finfo.min additive row is
*not* empty: golden adds it in float64 like any float mask (an almost
uniform row in bf16/fp32, a plain softmax in fp16) - the backends that turn it into NaN are wrong.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

B, H, N, S, D = 2, 2, 8, 16, 32
EMPTY = (1, 3)  # query rows masked out entirely
LEFT_PAD = 3  # batch element 1 starts with this many pad tokens


def run(ctx: ProbeContext) -> list[Case]:
    q, k, v = ctx.cast(ctx.randn(B, H, N, D, salt=1), ctx.randn(B, H, S, D, salt=2),
                       ctx.randn(B, H, S, D, salt=3))
    cases = []
    keep = torch.ones(1, 1, N, S, dtype=torch.bool)
    keep[..., EMPTY, :] = False
    cases.append(ctx.check("bool mask, all-False rows", q, k, v, attn_mask=keep))
    neg_inf = torch.zeros(1, 1, N, S, dtype=ctx.dtype).masked_fill(~keep, float("-inf"))
    cases.append(ctx.check("additive -inf rows", q, k, v, attn_mask=neg_inf))
    fmin = torch.zeros(1, 1, N, S, dtype=ctx.dtype).masked_fill(~keep, torch.finfo(ctx.dtype).min)
    cases.append(ctx.check("additive finfo.min rows", q, k, v, attn_mask=fmin))
    # Left padding x causal, self-attention: pad query rows see only pad keys -> empty.
    qs, ks, vs = ctx.cast(ctx.randn(B, H, S, D, salt=4), ctx.randn(B, H, S, D, salt=5),
                          ctx.randn(B, H, S, D, salt=6))
    pad = torch.ones(B, 1, 1, S, dtype=torch.bool)
    pad[1, ..., :LEFT_PAD] = False
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    padded = pad & causal
    cases.append(ctx.check("left padding x causal", qs, ks, vs, attn_mask=padded))
    cases.append(ctx.check("zero-length K/V", q, k[..., :0, :], v[..., :0, :]))
    note = f"empty rows: {ctx.empty_rows} (the declared convention)"
    return [replace(c, verdict=replace(c.verdict, note=c.verdict.note or note)) if c.verdict.status == "pass"
            and "finfo" not in c.label else c for c in cases]


PROBE = Probe(
    name="fully-masked-rows",
    summary="all-False bool rows, all -inf / finfo.min additive rows, left pad x causal, S = 0",
    refs=("pytorch/pytorch#103749", "pytorch/pytorch#103963", "pytorch/pytorch#109517",
          "huggingface/transformers#29318", "Dao-AILab/flash-attention#978"),
    run=run,
)
