"""Helpers shared by the example kernels (and proof that a file target can import its siblings)."""

from __future__ import annotations

import torch


def expand_kv(x, h: int):
    """(B, G, S, d) -> (B, H, S, d): query head i reads kv head i // (H // G)."""
    return x if x.shape[1] == h else x.repeat_interleave(h // x.shape[1], dim=1)


def mask_bias(attn_mask, is_causal: bool, n: int, s: int, device):
    """(keep bool, additive float32), both broadcastable to (B, H, N, S)."""
    keep = torch.ones(n, s, dtype=torch.bool, device=device)
    additive = torch.zeros(n, s, device=device)
    if is_causal:
        keep = keep & torch.ones(n, s, dtype=torch.bool, device=device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            additive = additive + attn_mask.float()
    return keep, additive
