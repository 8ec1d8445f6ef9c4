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

Cheap by construction: rounding to nearest is monotone, so the two largest rounded scores of a row
are the rounded two largest raw scores. A row's max and runner-up (``topk``) decide whether it ties,
and only those two values per row are rounded; the optional ``detail`` (how many scores tie) counts
the tied rows in full.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from attnum.attention import masks, steps
from attnum.errors import AttnumInputError
from attnum.numerics.formats import TORCH_DTYPE_NAMES, FloatFormat, get_format, torch_dtype
from attnum.numerics.policy import Policy, parse_policy
from attnum.numerics.rounding import round_to


@dataclass(frozen=True, kw_only=True)
class TieCount:
    """Counts over rows (or row-tiles with ``block``): ``rows`` with an unmasked key, ``exact`` with
    more than one score equal to the max, ``near`` with more than one within ``tol`` of it; with
    ``detail``, ``max_ties`` the most scores within ``tol`` of one row's max and ``ties`` the sum
    over ``near`` rows of their tie counts (the exact 1s that row sums and P V would hold), else None."""

    rows: int = 0
    exact: int = 0
    near: int = 0
    max_ties: int | None = None
    ties: int | None = None

    def __add__(self, other: TieCount) -> TieCount:
        def both(f, a, b):
            return None if a is None and b is None else f(a or 0, b or 0)

        return TieCount(rows=self.rows + other.rows, exact=self.exact + other.exact, near=self.near + other.near,
                        max_ties=both(max, self.max_ties, other.max_ties),
                        ties=both(lambda a, b: a + b, self.ties, other.ties))

    @property
    def near_fraction(self) -> float:
        return self.near / self.rows if self.rows else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "near_fraction": self.near_fraction}


def count_ties(s: torch.Tensor, *, fmt: str | FloatFormat | None = None, tol: float = steps.QIU_YAO_TOL,
               block: int | None = None, detail: bool = True) -> TieCount:
    """Tie counts of scores ``s`` (..., S) as they lie on ``fmt``'s grid (None: ``s`` already does).

    ``block`` pads the last tile with -inf, which ties with nothing. ``detail=False`` skips
    ``max_ties`` and ``ties`` (the only part that reads every score of a tied row again).
    """
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise AttnumInputError(f"tol={tol!r} is not allowed; expected a non-negative finite number")
    fmt = get_format(fmt, param="fmt") if fmt is not None else None
    if block is not None:
        if not isinstance(block, int) or isinstance(block, bool) or block < 1:
            raise AttnumInputError(f"block={block!r} is not allowed; expected a positive integer")
        S = s.shape[-1]
        pad = -S % block
        if pad:
            s = torch.nn.functional.pad(s, (0, pad), value=float("-inf"))
        s = s.reshape(*s.shape[:-1], (S + pad) // block, block)
    if s.numel() == 0:
        return TieCount(max_ties=0 if detail else None, ties=0 if detail else None)
    s = s.reshape(-1, s.shape[-1])  # rows x keys
    if s.shape[-1] < 2:  # one key per row: nothing can tie
        rows = int(torch.isfinite(s).sum())
        return TieCount(rows=rows, max_ties=int(rows > 0) if detail else None, ties=0 if detail else None)
    top = torch.topk(s, 2, dim=-1).values  # (rows, 2): the max and the runner-up
    if fmt is not None:
        top = round_to(top, fmt)
    m, second = top[:, 0], top[:, 1]
    finite = torch.isfinite(m)
    gap2 = m - second  # NaN on rows with no unmasked key (-inf - -inf): they count nothing
    tied = finite & (gap2 <= tol)
    out = dict(rows=int(finite.sum()), exact=int((finite & (gap2 == 0)).sum()), near=int(tied.sum()))
    if not detail:
        return TieCount(**out)
    rows_t = s[tied]
    if fmt is not None:
        rows_t = round_to(rows_t, fmt)
    counts = ((m[tied, None] - rows_t) <= tol).sum(dim=-1)
    return TieCount(**out, max_ties=int(counts.max()) if counts.numel() else int(out["rows"] > 0),
                    ties=int(counts.sum()))


def _load(x: torch.Tensor, policy: Policy) -> torch.Tensor:
    """:func:`steps.load_input`, with a fast path for carrier tensors already on the ``inputs`` grid
    (a compare point's inputs): a round trip through the format's torch dtype is exact exactly for
    them, and then x itself is the rounded value (no second rounding; the same values either way)."""
    if x.dtype in (torch.float32, torch.float64) and policy.inputs.name in TORCH_DTYPE_NAMES:
        if torch.equal(x.to(torch_dtype(policy.inputs)).to(x.dtype), x):
            return x.to(policy.carrier)
    return steps.load_input(x, policy)


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
    detail: bool = False,
) -> TieCount:
    """Tie counts of the scores a kernel under ``policy`` forms from q (B, H, N, d), k (B, G, S, d):
    the inputs preamble and the ``scores`` site of flash and baseline (:func:`steps.scores`), with
    the call's masking, in query chunks (no N x S tensor beyond one chunk's). ``block``: per tile."""
    return score_ties_by(q, k, blocks=(block,), policy=policy, scale=scale, attn_mask=attn_mask,
                         is_causal=is_causal, causal_alignment=causal_alignment, window=window, tol=tol,
                         detail=detail)[0]


def score_ties_by(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    blocks: tuple[int | None, ...] = (None,),
    policy: str | Policy = "fp32",
    scale: float | None = None,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    tol: float = steps.QIU_YAO_TOL,
    detail: bool = False,
) -> list[TieCount]:
    """:func:`score_ties` for several views at once (None: full rows; an integer: tiles of that many
    keys), forming the scores once. Without an additive mask the ``scores`` rounding is applied by
    :func:`count_ties` to the values it reads (monotone: the same counts); an additive mask is added
    and rounded as :func:`steps.scores` does."""
    policy = parse_policy(policy)
    B, H, _, N, S, d, _ = masks.check_qkv(q, k, k)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    c = policy.carrier
    q_c = _load(q, policy)
    k_c = masks.expand_kv(_load(k, policy), H)
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S), causal_alignment=causal_alignment, window=window)
    totals = [TieCount(max_ties=0 if detail else None, ties=0 if detail else None) for _ in blocks]
    step = steps.query_chunk(B, H, S)
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        tile = mk.tile(i0, i1, 0, S, c, q_c.device)
        if tile.additive is not None:
            s, fmt = steps.scores(q_c[:, :, i0:i1], k_c, scale, tile, policy), None
        else:
            s = steps.matmul(q_c[:, :, i0:i1], k_c.transpose(-1, -2), policy)
            s = s.mul_(scale) if scale != 1.0 else s
            s, fmt = masks.apply_keep_(s, tile.keep), policy.scores
        totals = [t + count_ties(s, fmt=fmt, tol=tol, block=b, detail=detail) for t, b in zip(totals, blocks)]
    return totals
