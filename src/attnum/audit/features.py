"""What the score-feature probes share: the declaration check and one case judged on a reference input.

A feature (softcap, sliding window, attention sinks: :mod:`attnum.kernels.conventions`) is passed to
the target as one keyword argument -- to its SDPA entry point, and to its decode entry point when that
takes it (declared on the entry or the target) -- and the references never see it. Each probe instead rewrites the
feature as plain attention that golden, the same-precision baseline and the term sizes already
understand exactly (capped scores as an additive mask on zero queries, a window as a bool mask, a sink
as one more key of value 0), so the verdict uses the audit's ordinary rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch

from attnum.attention import masks
from attnum.attention.serving.paged import to_pages
from attnum.audit.harness import FP32, Case, ProbeContext, raised
from attnum.audit.serving import decode_call, unsupported
from attnum.audit.verdict import terms_coefficient
from attnum.kernels import conventions
from attnum.kernels.serving import empty_rows_of, entry


def undeclared(ctx: ProbeContext, name: str, what: str, *, sdpa: bool = True) -> Case | None:
    """The "unsupported" case when the target does not declare ``attnum_<name>`` or, for a feature of the SDPA
    entry point (``sdpa``), has none (a decode-only serving target: its feature cases are the decode ones),
    else None."""
    if sdpa and getattr(ctx.target, "attnum_sdpa", True) is False:
        return unsupported(name, "target has no SDPA entry point (its decode entry is asked below, if it takes "
                                 "the feature)")
    try:
        if conventions.feature(ctx.target, name):
            return None
    except Exception as exc:  # noqa: BLE001 - a malformed declaration is the target's error
        return ctx.finish(name, raised(exc))
    return unsupported(name, f"target does not declare {conventions.FEATURES[name]} = True ({what}); "
                             "nothing was asked of it")


def score_order_allowance(q, k, v, probs: torch.Tensor) -> torch.Tensor:
    """(B, H, N, dv) float64: sum_j P_ij |V_jc - O_ic| s |q_i| . |k_j| x c(fp32, d), with ``probs`` (B, H, N, S)
    the golden probabilities of the transformed scores: what the order of the fp32 q . k sum can do
    to the output when each score then passes through a map of slope <= 1 (tanh capping does).
    The rewrite's own q . k is not the target's, so :func:`attnum.audit.terms.score_order_terms` on it
    would allow nothing for this."""
    H, d = q.shape[1], q.shape[-1]
    qd, kd, vd = q.double(), masks.expand_kv(k.double(), H), masks.expand_kv(v.double(), H)
    size = (qd.abs() @ kd.abs().transpose(-1, -2)) / math.sqrt(d)
    o = probs @ vd
    spread = (vd.unsqueeze(2) - o.unsqueeze(3)).abs()  # (B, H, N, S, dv)
    return torch.einsum("bhns,bhns,bhnsc->bhnc", probs, size, spread) * terms_coefficient(FP32, d)


def feature_case(ctx: ProbeContext, label: str, call: tuple, call_kw: dict, ref: tuple, ref_kw: dict,
                 extra_floor: torch.Tensor | None = None) -> Case:
    """Call the target on ``call`` = (q, k, v) with ``call_kw`` (the feature's keyword among them) and
    judge its output against the plain-attention rewrite ``ref`` = (q, k, v) with ``ref_kw``."""
    try:
        out = ctx.call(*call, label=label, **call_kw)
    except Exception as exc:  # noqa: BLE001 - any exception from the kernel is its verdict
        return ctx.finish(label, raised(exc))
    return ctx.check(label, *ref, out=out, extra_floor=extra_floor, **ref_kw)


def decode_refusal(ctx: ProbeContext, name: str) -> list[Case] | None:
    """None when the target's decode entry takes the feature ``name`` (declared on the entry or on the target:
    :func:`attnum.kernels.conventions.entry_feature`), else what the probe's decode part returns instead: no
    case for a target without a decode entry, one "unsupported" case for a decode that does not take it."""
    fn = entry(ctx.target, "decode")
    if fn is None:
        return []
    try:
        if conventions.entry_feature(ctx.target, fn, name):
            return None
    except Exception as exc:  # noqa: BLE001 - a malformed declaration is the target's error
        return [ctx.finish(f"{name} decode", raised(exc))]
    return [unsupported(f"{name} decode", f"its decode entry does not declare {conventions.FEATURES[name]} = True; "
                                          "nothing was asked of it")]


def decode_feature_cases(ctx: ProbeContext, label: str, q, k, v, lens, *, feature_kw: dict,
                         rewrite: Callable, page: int = 16, num_splits: int = 1, is_causal: bool = True,
                         fill_k: float = 0.0, fill_v: float = 0.0) -> list[Case]:
    """The target's decode entry with a score feature: q (B, H, N, d), the cache k, v (B, G, S, d) in
    ctx.dtype, paged (P = ``page``; slots past each length and the spare page hold ``fill_k`` / ``fill_v``),
    called with ``feature_kw`` (``softcap=``, ``window_size=``, ``sinks=``). Each sequence b's rows are judged
    (one case per sequence, bottom-right) against ``rewrite(q_b, k_b, v_b)`` -> (ref, ref_kw, extra_floor):
    the feature as plain attention on the sequence's first L keys (what the SDPA cases of the same probe use)."""
    kp, table = to_pages(k, page, cache_seqlens=lens, spare_pages=1, fill=fill_k, seed=1)
    vp, _ = to_pages(v, page, cache_seqlens=lens, spare_pages=1, fill=fill_v, seed=1)
    got = decode_call(ctx, label, q, k, v, cache_seqlens=lens, block_table=table, pages=(kp, vp),
                      num_splits=num_splits, is_causal=is_causal, **feature_kw)
    if isinstance(got, Case):
        return [got]
    o, _, lens = got
    o = o.detach().to("cpu", torch.float64)
    bctx = replace(ctx, causal_alignment="bottom_right", empty_rows=empty_rows_of(ctx.target, "decode"))
    cases = []
    rq, rk, rv = ctx.received(q, k, v)  # the rewrite reads what the kernel computed with
    for b, L in enumerate(lens):
        ref, ref_kw, extra = rewrite(rq[b:b + 1], rk[b:b + 1, :, :L], rv[b:b + 1, :, :L])
        cases.append(bctx.check(f"{label} seq {b} (L={L})", *ref, out=o[b:b + 1], extra_floor=extra, **ref_kw))
    return cases
