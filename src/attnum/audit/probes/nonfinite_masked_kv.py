"""NaN / Inf / 1e30 planted in masked-out K or V rows, by an explicit mask and by the causal mask.

Models pytorch/pytorch#101967 (SDPA returns NaN when a masked-out key holds NaN; 1e10 there is
harmless) and vllm-project/vllm#53628 (stale KV-cache blocks with non-finite values leak through
``0 * NaN`` when masking happens after the math). Golden is the output for the same inputs with the
masked rows zeroed, i.e. "the mask is structural". Cases: every key a ``bool`` mask hides from every
query, each value in K and then in V; and ``is_causal=True`` with NaN in K, then in V, at the last key
(N = S = 48, and N = 16 < S = 48 under the target's alignment): the rows that see that key are not
judged (their golden is NaN too), every row that masks it must come out right -- a tiled kernel that
multiplies the diagonal tile's P = 0 by the whole tile's V turns it into NaN.

The planted values are in a dense tensor the caller handed over, and torch itself propagates them, so
this is reported as behaviour and fails only under --strict. NaN in memory a serving kernel's own
lengths, pages or window make dead (slots past ``seq_len``, pages past the block table, keys outside a
sliding window, other sequences of a varlen batch) is not: the probes page-padding-leak,
block-table-past-end, empty-sequence, window-poisoned-keys and varlen-ragged fail it.
"""

from __future__ import annotations

import torch

from attnum.attention.masks import causal_bool
from attnum.audit.construct import plant, poisons
from attnum.audit.harness import Case, Probe, ProbeContext, raised

N, S, D = 8, 24, 32
MASKED = (5, S - 1)  # key positions every query masks
CAUSAL = ((48, 48), (16, 48))  # (N, S) of the causal cases


def run(ctx: ProbeContext) -> list[Case]:
    ctx = ctx.as_behaviour()
    q, k, v = ctx.cast(ctx.randn(1, 2, N, D, salt=1), ctx.randn(1, 2, S, D, salt=2),
                       ctx.randn(1, 2, S, D, salt=3))
    keep = torch.ones(1, 1, 1, S, dtype=torch.bool)
    keep[..., list(MASKED)] = False
    clean_k, clean_v = k.clone(), v.clone()
    clean_k[..., list(MASKED), :] = 0
    clean_v[..., list(MASKED), :] = 0
    big = min(1e30, torch.finfo(ctx.dtype).max)  # 1e30 is +inf in fp16; use its max there
    cases = []
    for what, val in (("NaN", float("nan")), ("+Inf", float("inf")), ("-Inf", float("-inf")), ("big", big)):
        for which in ("K", "V"):
            kk, vv = clean_k.clone(), clean_v.clone()
            (kk if which == "K" else vv)[..., list(MASKED), :] = val
            cases.append(ctx.check(f"{what} in masked {which}", q, kk, vv, attn_mask=keep,
                                   clean=(q, clean_k, clean_v)))
    for n, s in CAUSAL:
        for which in poisons():
            cases.append(_causal_case(ctx, n, s, which))
    return cases


def _causal_case(ctx: ProbeContext, n: int, s: int, which: str) -> Case:
    """NaN at key s - 1 under ``is_causal``: the rows that see it take golden's value (not judged)."""
    q, k, v = ctx.cast(ctx.randn(1, 2, n, D, salt=4 + n), ctx.randn(1, 2, s, D, salt=5 + s),
                       ctx.randn(1, 2, s, D, salt=6 + s))
    last = torch.arange(s) == s - 1
    kk, vv = plant(k, v, last, which)
    clean = (q, k.masked_fill(last[:, None], 0.0), v.masked_fill(last[:, None], 0.0))
    sees = causal_bool(n, s, ctx.causal_alignment)[:, -1]  # (n,) rows whose keys include the poisoned one
    label = f"causal N={n} S={s}, NaN in {which} at the last key ({int(sees.sum())} row(s) see it, not judged)"
    try:
        out = ctx.call(q, kk, vv, is_causal=True, label=label)
    except Exception as exc:  # noqa: BLE001 - any exception from the kernel is its verdict
        return ctx._case(label, raised(exc))
    want = ctx.expected(*clean, is_causal=True)
    out = torch.where(sees.view(1, 1, n, 1), want, out)
    return ctx.check(label, q, kk, vv, is_causal=True, clean=clean, out=out)


PROBE = Probe(
    name="nonfinite-masked-kv",
    summary="NaN/Inf/1e30 in K or V that a mask or is_causal hides (behaviour; fails under --strict)",
    refs=("pytorch/pytorch#101967", "vllm-project/vllm#53628"),
    run=run,
    kind="behaviour",
)
