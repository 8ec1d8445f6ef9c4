"""Mask semantics, in one place for golden, baseline, flash and the auditor.

Shape alphabet: B batch, H query heads, G key/value heads, N query length, S key length,
d head dim, dv value dim.

- A bool ``attn_mask`` means True = attend (as torch SDPA); it becomes a -inf bias.
- A float ``attn_mask`` is added to the scores (its own values, -inf or finite "minus infinity").
- ``is_causal`` uses torch's top-left alignment: query i sees keys j <= i. flash-attn >= 2.1 aligns
  bottom-right (query i sees keys j <= i + S - N); ``causal_bool`` builds either.
- A row whose every key is masked (all bias = -inf) produces zeros and log-sum-exp -inf
  (torch >= 2.5 semantics).
"""

from __future__ import annotations

from typing import Literal

import torch

from attnum.errors import AttnumInputError

Alignment = Literal["top_left", "bottom_right"]


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
    if dk != d:
        raise AttnumInputError(f"k head dim={dk} is not allowed; expected q's head dim {d}")
    if (Bk, Bv) != (B, B):
        raise AttnumInputError(f"k/v batch=({Bk}, {Bv}) is not allowed; expected q's batch {B}")
    if (Gv, Sv) != (G, S):
        raise AttnumInputError(f"v.shape={tuple(v.shape)} is not allowed; expected heads and length of k {(G, S)}")
    if G < 1 or H % G:
        raise AttnumInputError(f"kv heads={G} is not allowed; expected a divisor of the {H} query heads")
    return B, H, G, N, S, d, dv


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


def build_masks(
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    shape_BHNS: tuple[int, int, int, int],
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Split the masking into (additive values, -inf bias), each broadcastable to (B, H, N, S) or None.

    The additive part is what a float ``attn_mask`` adds to the scores (rounded at the scores site
    by the implementations); the -inf part (bool mask, causal) is exact in every format.
    """
    B, H, N, S = shape_BHNS
    additive = None
    hard = None
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise AttnumInputError(f"attn_mask={type(attn_mask).__name__} is not allowed; expected a tensor or None")
        try:
            torch.broadcast_shapes(attn_mask.shape, (B, H, N, S))
        except RuntimeError:
            raise AttnumInputError(
                f"attn_mask.shape={tuple(attn_mask.shape)} is not allowed; expected a shape broadcastable to "
                f"(B, H, N, S)={(B, H, N, S)}"
            ) from None
        if attn_mask.dtype == torch.bool:
            hard = _neg_inf_where_false(attn_mask.to(device), dtype)
        elif attn_mask.is_floating_point():
            additive = attn_mask.to(device=device, dtype=dtype)
        else:
            raise AttnumInputError(f"attn_mask.dtype={attn_mask.dtype} is not allowed; expected bool or floating")
    if is_causal:
        causal = _neg_inf_where_false(causal_bool(N, S, device=device), dtype)
        hard = causal if hard is None else hard + causal
    return additive, hard


def _neg_inf_where_false(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, float("-inf"))


def slice_keys(mask: torch.Tensor | None, j0: int, j1: int) -> torch.Tensor | None:
    """The columns [j0, j1) of a mask broadcastable to (B, H, N, S); size-1 key dims stay."""
    if mask is None or mask.shape[-1] == 1:
        return mask
    return mask[..., j0:j1]


def slice_queries(mask: torch.Tensor | None, i0: int, i1: int) -> torch.Tensor | None:
    """The rows [i0, i1) of a mask broadcastable to (B, H, N, S)."""
    if mask is None or mask.dim() < 2 or mask.shape[-2] == 1:
        return mask
    return mask[..., i0:i1, :]
