"""What the score-feature probes share: the declaration check and one case judged on a reference input.

A feature (softcap, sliding window, attention sinks: :mod:`attnum.kernels.conventions`) is passed to
the target as one keyword argument; the references never see it. Each probe instead rewrites the
feature as plain attention that golden, the same-precision baseline and the term sizes already
understand exactly (capped scores as an additive mask on zero queries, a window as a bool mask, a sink
as one more key of value 0), so the verdict uses the audit's ordinary rule.
"""

from __future__ import annotations

import math

import torch

from attnum.attention import masks
from attnum.audit.harness import FP32, Case, ProbeContext, raised
from attnum.audit.serving import unsupported
from attnum.audit.verdict import terms_coefficient
from attnum.kernels import conventions


def undeclared(ctx: ProbeContext, name: str, what: str) -> Case | None:
    """The "unsupported" case when the target does not declare ``attnum_<name>``, else None."""
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
