"""Ties at the row maximum: the rows where FlashAttention's P~ = exp(S - m) holds several exact 1s.

Qiu & Yao (arXiv 2510.04212) trace biased bf16 rounding in training to rows whose maximum score is
attained more than once: each copy gives P~ = exp(0) = 1 exactly. This module counts such rows.

Shape alphabet: B batch, H heads, N queries, S keys, d head dim, Bc keys per tile.

A score s_j *ties* with its row's maximum m when m - s_j <= ``tol`` (absolute, in logit units; the
tie rule of :func:`attnum.attention.steps.qiu_yao_shift`), and *equals* it when s_j == m. The
scores are counted as they lie on the ``scores`` grid: either already rounded (the kernel's own
S, :func:`score_ties`), or rounded here to ``fmt`` (:func:`count_ties`). A row without an unmasked
key (m = -inf) is not counted.

``block``: count per tile of ``block`` keys instead of per full row (the view of flash's per-tile
rule: a row whose two maxima fall in different tiles ties in the full row but in no tile).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from attnum.attention import masks, steps
from attnum.errors import AttnumInputError
from attnum.formats import FloatFormat, get_format
from attnum.policy import Policy, parse_policy
from attnum.rounding import round_to


@dataclass(frozen=True, kw_only=True)
class TieCount:
    """Counts over rows (or row-tiles with ``block``): ``rows`` with an unmasked key, ``exact`` with
    more than one score equal to the max, ``near`` with more than one within ``tol`` of it,
    ``max_ties`` the most scores within ``tol`` of one row's max, ``ties`` the sum over ``near``
    rows of their tie counts (the exact 1s that row sums and P V would hold)."""

    rows: int = 0
    exact: int = 0
    near: int = 0
    max_ties: int = 0
    ties: int = 0

    def __add__(self, other: TieCount) -> TieCount:
        return TieCount(rows=self.rows + other.rows, exact=self.exact + other.exact, near=self.near + other.near,
                        max_ties=max(self.max_ties, other.max_ties), ties=self.ties + other.ties)

    @property
    def near_fraction(self) -> float:
        return self.near / self.rows if self.rows else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "near_fraction": self.near_fraction}


def count_ties(s: torch.Tensor, *, fmt: str | FloatFormat | None = None, tol: float = steps.QIU_YAO_TOL,
               block: int | None = None) -> TieCount:
    """Tie counts of scores ``s`` (..., S); ``fmt``: round to it first (None: ``s`` is on its grid).

    One pass over ``s`` in its own dtype (float32/float64 carriers; no copy unless ``fmt`` rounds or
    ``block`` pads the last tile with -inf, which ties with nothing).
    """
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise AttnumInputError(f"tol={tol!r} is not allowed; expected a non-negative finite number")
    if fmt is not None:
        s = round_to(s, get_format(fmt, param="fmt"))
    if block is not None:
        if not isinstance(block, int) or isinstance(block, bool) or block < 1:
            raise AttnumInputError(f"block={block!r} is not allowed; expected a positive integer")
        S = s.shape[-1]
        pad = -S % block
        if pad:
            s = torch.nn.functional.pad(s, (0, pad), value=float("-inf"))
        s = s.reshape(*s.shape[:-1], (S + pad) // block, block)
    if s.numel() == 0:
        return TieCount()
    m = s.amax(dim=-1, keepdim=True)
    gap = m - s  # NaN on rows with no unmasked key (-inf - -inf), so they count nothing
    near = (gap <= tol).sum(dim=-1)
    exact = (gap == 0).sum(dim=-1)
    tied = near > 1
    return TieCount(rows=int(torch.isfinite(m).sum()), exact=int((exact > 1).sum()), near=int(tied.sum()),
                    max_ties=int(near.max()), ties=int(near[tied].sum()))


def score_ties(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    policy: str | Policy = "fp32",
    scale: float | None = None,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    block: int | None = None,
    tol: float = steps.QIU_YAO_TOL,
) -> TieCount:
    """Tie counts of the scores a kernel under ``policy`` forms from q (B, H, N, d), k (B, G, S, d):
    the inputs preamble and the ``scores`` site of flash and baseline (:func:`steps.scores`), with
    the call's masking, in query chunks (no N x S tensor beyond one chunk's)."""
    policy = parse_policy(policy)
    B, H, _, N, S, d, _ = masks.check_qkv(q, k, k)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    c = policy.carrier
    q_c = steps.load_input(q, policy)
    k_c = masks.expand_kv(steps.load_input(k, policy), H)
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S), causal_alignment=causal_alignment, window=window)
    total = TieCount()
    step = steps.query_chunk(B, H, S)
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        s = steps.scores(q_c[:, :, i0:i1], k_c, scale, mk.tile(i0, i1, 0, S, c, q_c.device), policy)
        total = total + count_ties(s, tol=tol, block=block)
    return total
