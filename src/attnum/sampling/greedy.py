"""Greedy (temperature 0) speculative verification and the ties a format makes (vLLM issue 7627).

Shape alphabet: n rows of V logits.
"""

from __future__ import annotations

import torch

from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.rounding import round_to


def greedy_verify(target_logits: torch.Tensor, draft_token: int, fmt: str | FloatFormat) -> tuple[int, int]:
    """(plain greedy's token, speculative greedy's token) at one position, logits (V,) in ``fmt``.

    Plain greedy is argmax (ties: the first index, as torch). Speculative greedy accepts the draft
    token when its logit is a maximum (a rank computed with ``>=``, vLLM issue 7627), else emits the
    argmax. They differ exactly when the draft token ties the maximum at a later index.
    """
    l = round_to(torch.as_tensor(target_logits).double(), get_format(fmt))
    plain = int(torch.argmax(l))
    spec = draft_token if bool(l[draft_token] >= l.max()) else plain
    return plain, spec


def greedy_ties(logits: torch.Tensor, fmt: str | FloatFormat) -> dict[str, float]:
    """For logit rows (n, V) in float64: the fraction of rows whose maximum is tied once rounded to
    ``fmt`` (greedy then rests on a tie-break rule), whose top two lie within one ulp (a one-ulp
    difference between two computations of the logits, e.g. batch-variant GEMMs, can swap them),
    and whose argmax in ``fmt`` differs from the float64 argmax."""
    from attnum.numerics.metrics import ulp

    fmt = get_format(fmt)
    x = torch.as_tensor(logits).double()
    l = round_to(x, fmt)
    top = torch.topk(l, 2, dim=-1).values
    tie = top[:, 0] == top[:, 1]
    near = (top[:, 0] - top[:, 1]) <= ulp(top[:, 0], fmt)
    flip = torch.argmax(l, -1) != torch.argmax(x, -1)
    return {"tie_rate": tie.double().mean().item(), "near_tie_rate": near.double().mean().item(),
            "flip_rate": flip.double().mean().item()}
