"""Mask semantics, in one place for golden, baseline, flash and the auditor.

Shape alphabet: B batch, H query heads, G key/value heads, N query length, S key length,
d head dim, dv value dim.

- A bool ``attn_mask`` means True = attend (as torch SDPA); it becomes a -inf bias.
- A float ``attn_mask`` is added to the scores (its own values, -inf or finite "minus infinity").
- ``is_causal`` uses torch's top-left alignment: query i sees keys j <= i. flash-attn >= 2.1 aligns
  bottom-right (query i sees keys j <= i + S - N); ``causal_bool`` builds either.
- ``window=(left, right)`` (sliding window, as flash-attn's ``window_size``): query i sees keys
  j with i + off - left <= j <= i + off + right, off = 0 (top-left) or S - N (bottom-right); -1 or
  None on a side means unbounded. ``is_causal`` is right = 0.
- A row whose every key is masked (all bias = -inf) produces zeros and log-sum-exp -inf
  (torch >= 2.5 semantics).

Memory: :class:`Masking` never builds an N x S tensor. Causal and window masks are made from index
arithmetic per (query chunk, key tile); a user ``attn_mask`` is sliced per tile in its own
(broadcast) shape, so a (B, 1, 1, S) padding mask stays (B, 1, 1, S).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Literal

import torch

from attnum.errors import AttnumInputError

WINDOW_MAX = 2**62  # a reach past any sequence; beyond it torch index arithmetic overflows

Alignment = Literal["top_left", "bottom_right"]
ALIGNMENTS = ("top_left", "bottom_right")


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int, int, int]:
    """Validate (B, H, N, d), (B, G, S, d), (B, G, S, dv); returns B, H, G, N, S, d, dv."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise AttnumInputError(f"{name}={type(t).__name__} is not allowed; expected a torch.Tensor")
        if t.dim() != 4:
            raise AttnumInputError(f"{name}.shape={tuple(t.shape)} is not allowed; expected 4-D (B, H, N, d)")
        if not t.is_floating_point():
            raise AttnumInputError(f"{name}.dtype={t.dtype} is not allowed; expected a floating dtype")
    B, H, N, d = q.shape
    Bk, G, S, dk = k.shape
    Bv, Gv, Sv, dv = v.shape
    if d < 1:
        raise AttnumInputError(f"q head dim={d} is not allowed; expected d >= 1 (the scale is 1/sqrt(d))")
    if not (q.device == k.device == v.device):
        raise AttnumInputError(f"q/k/v devices=({q.device}, {k.device}, {v.device}) are not allowed; expected "
                               "all three on one device")
    if dk != d:
        raise AttnumInputError(f"k head dim={dk} is not allowed; expected q's head dim {d}")
    if (Bk, Bv) != (B, B):
        raise AttnumInputError(f"k/v batch=({Bk}, {Bv}) is not allowed; expected q's batch {B}")
    if (Gv, Sv) != (G, S):
        raise AttnumInputError(f"v.shape={tuple(v.shape)} is not allowed; expected heads and length of k {(G, S)}")
    if G < 1 or H % G:
        raise AttnumInputError(f"kv heads={G} is not allowed; expected a divisor of the {H} query heads")
    return B, H, G, N, S, d, dv


def _numpy_bool(x: object) -> bool:
    return type(x).__module__ == "numpy" and type(x).__name__ in ("bool", "bool_")


def resolve_scale(scale: object, d: int) -> float:
    """``scale`` as a float (``1/sqrt(d)`` when None); a non-number, a bool or a non-finite value is an
    input error naming ``scale``."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or _numpy_bool(scale) or not isinstance(scale, numbers.Real) and not (
            isinstance(scale, torch.Tensor) and scale.numel() == 1 and scale.dtype != torch.bool):
        raise AttnumInputError(f"scale={scale!r} is not allowed; expected a finite number or None (1/sqrt(d))")
    value = float(scale)
    if not math.isfinite(value):
        raise AttnumInputError(f"scale={value!r} is not allowed; expected a finite number or None (1/sqrt(d))")
    return value


def expand_kv(x_BGSd: torch.Tensor, H: int) -> torch.Tensor:
    """Grouped-query attention: query head h reads key/value head h // (H // G)."""
    B, G, S, d = x_BGSd.shape
    if G == H:
        return x_BGSd
    return x_BGSd[:, :, None].expand(B, G, H // G, S, d).reshape(B, H, S, d)


def causal_bool(N: int, S: int, alignment: Alignment = "top_left", device=None) -> torch.Tensor:
    """(N, S) bool, True where query i may attend key j."""
    i = torch.arange(N, device=device)[:, None]
    j = torch.arange(S, device=device)[None, :]
    if alignment == "top_left":
        return j <= i
    if alignment == "bottom_right":
        return j <= i + (S - N)
    raise AttnumInputError(f"alignment={alignment!r} is not allowed; expected 'top_left' or 'bottom_right'")



@dataclass(frozen=True, kw_only=True)
class Tile:
    """The masking of one (query rows, key columns) tile, each part broadcastable to (B, H, n, s).

    ``additive``: a float mask's values, added to the scores (and rounded there); ``keep``: bool,
    False where the score becomes -inf (bool masks, causal, window), exact in every format.
    """

    additive: torch.Tensor | None = None
    keep: torch.Tensor | None = None


@dataclass(frozen=True, kw_only=True)
class Masking:
    """The masking of one attention call over (B, H, N, S), cut into tiles on demand."""

    B: int
    H: int
    N: int
    S: int
    attn_mask: torch.Tensor | None = None
    is_causal: bool = False
    alignment: str = "top_left"
    window: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.alignment not in ALIGNMENTS:
            raise AttnumInputError(f"causal_alignment={self.alignment!r} is not allowed; expected one of {ALIGNMENTS}")
        m = self.attn_mask
        if m is not None:
            if not isinstance(m, torch.Tensor):
                raise AttnumInputError(f"attn_mask={type(m).__name__} is not allowed; expected a tensor or None")
            try:
                torch.broadcast_shapes(m.shape, (self.B, self.H, self.N, self.S))
            except RuntimeError:
                raise AttnumInputError(
                    f"attn_mask.shape={tuple(m.shape)} is not allowed; expected a shape broadcastable to "
                    f"(B, H, N, S)={(self.B, self.H, self.N, self.S)}"
                ) from None
            if m.dim() > 4:
                raise AttnumInputError(f"attn_mask.shape={tuple(m.shape)} is not allowed; expected at most 4-D, "
                                       f"broadcastable to (B, H, N, S)={(self.B, self.H, self.N, self.S)}")
            if m.dtype != torch.bool and not m.is_floating_point():
                raise AttnumInputError(f"attn_mask.dtype={m.dtype} is not allowed; expected bool or floating")
        w = self.window
        if w is not None:
            ok = isinstance(w, (tuple, list)) and len(w) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) and -1 <= x < WINDOW_MAX for x in w)
            if not ok:
                raise AttnumInputError(f"window={w!r} is not allowed; expected (left, right) integers in "
                                       f"[-1, 2**62) (-1 = unbounded)")
            object.__setattr__(self, "window", (int(w[0]), int(w[1])))

    @property
    def offset(self) -> int:
        """The diagonal's key index for query 0: 0 top-left, S - N bottom-right."""
        return 0 if self.alignment == "top_left" else self.S - self.N

    @property
    def bounds(self) -> tuple[int | None, int | None]:
        """(left, right) reach from the diagonal; None = unbounded."""
        left, right = (None, None) if self.window is None else (
            None if self.window[0] < 0 else self.window[0], None if self.window[1] < 0 else self.window[1])
        if self.is_causal:
            right = 0 if right is None else min(right, 0)
        return left, right

    @property
    def is_empty(self) -> bool:
        return self.attn_mask is None and self.bounds == (None, None)

    def structural(self, i0: int, i1: int, j0: int, j1: int, device=None) -> torch.Tensor | None:
        """(i1-i0, j1-j0) bool from causal/window alone, or None when they mask nothing."""
        left, right = self.bounds
        if left is None and right is None:
            return None
        i = torch.arange(i0, i1, device=device)[:, None] + self.offset
        j = torch.arange(j0, j1, device=device)[None, :]
        keep = None
        if right is not None:
            keep = j <= i + right
        if left is not None:
            lo = j >= i - left
            keep = lo if keep is None else keep & lo
        return keep

    def tile(self, i0: int, i1: int, j0: int, j1: int, dtype: torch.dtype, device) -> Tile:
        """The masking of query rows [i0, i1) and keys [j0, j1): O(tile) memory."""
        keep = self.structural(i0, i1, j0, j1, device)
        additive = None
        m = self.attn_mask
        if m is not None:
            part = _slice(m, i0, i1, j0, j1).to(device)
            if part.dtype == torch.bool:
                keep = part if keep is None else keep & part
            else:
                additive = part.to(dtype)
        return Tile(additive=additive, keep=keep)

    def empty_rows(self, device=None) -> torch.Tensor:
        """Bool (B|1, H|1, N): rows with no attendable key, found chunk by chunk (additive -inf counts)."""
        if self.S == 0:
            return torch.ones(1, 1, self.N, dtype=torch.bool, device=device)
        out = torch.zeros(self.B, self.H, self.N, dtype=torch.bool, device=device)
        if self.is_empty:
            return out
        step = max(1, (1 << 22) // max(1, self.B * self.H * self.S))
        for i0 in range(0, self.N, step):
            i1 = min(self.N, i0 + step)
            t = self.tile(i0, i1, 0, self.S, torch.float64, device)
            alive = torch.ones(1, 1, i1 - i0, self.S, dtype=torch.bool, device=device)
            if t.keep is not None:
                alive = alive & t.keep
            if t.additive is not None:
                alive = alive & ~torch.isneginf(t.additive)
            out[:, :, i0:i1] = ~alive.any(dim=-1).expand(self.B, self.H, i1 - i0)
        return out


def masking(
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    shape_BHNS: tuple[int, int, int, int],
    *,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
) -> Masking:
    """The one constructor every implementation uses."""
    B, H, N, S = shape_BHNS
    if not isinstance(is_causal, bool) and not _numpy_bool(is_causal):  # "no" is truthy: never a str or an int
        raise AttnumInputError(f"is_causal={is_causal!r} is not allowed; expected True or False")
    return Masking(B=B, H=H, N=N, S=S, attn_mask=attn_mask, is_causal=bool(is_causal), alignment=causal_alignment,
                   window=window)


def causal_keep(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """(len(q_pos), len(k_pos)) bool: the causal mask between *global* positions (key <= query), for
    layouts whose shards hold non-contiguous positions (ring attention's zigzag)."""
    return k_pos[None, :] <= q_pos[:, None]


def apply_keep_(s: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Scores where ``keep`` is False become -inf, in place."""
    return s if keep is None else s.masked_fill_(~keep, float("-inf"))


def _slice(m: torch.Tensor, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """Rows [i0, i1) and columns [j0, j1) of a mask broadcastable to (B, H, N, S); size-1 dims stay."""
    if m.dim() >= 1 and m.shape[-1] != 1:
        m = m[..., j0:j1]
    if m.dim() >= 2 and m.shape[-2] != 1:
        m = m[..., i0:i1, :]
    return m
