"""FlashAttention's tiled attention, every rounding site named: the public entry :func:`flash_attention`.

The forward kernel (Algorithms 1 of FlashAttention and FlashAttention-2, the variants, Qiu & Yao's
max shift) is :mod:`attnum.attention.flash_forward`; the recomputing backward and its autograd
Function are :mod:`attnum.attention.flash_backward`. This module loads the inputs once and runs the
forward alone, or both when a gradient is wanted (it imports both; neither imports it).

Shape alphabet: B batch, H heads, G kv heads, N queries, S keys, d head dim, dv value dim.
"""

from __future__ import annotations

import torch

from attnum.attention import masks, steps
from attnum.attention.flash_backward import FlashAttentionFunction, FlashOptions
from attnum.attention.flash_forward import NEG_INF, VARIANTS, flash_forward, kv_tile_order  # noqa: F401 - also flash's names
from attnum.attention.tiles import resolve_tiles
from attnum.errors import AttnumInputError
from attnum.numerics.policy import Policy, parse_policy


@steps.no_autocast
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    policy: str | Policy = "fp32",
    block_q: int | None = None,
    block_k: int | None = None,
    sram: int | None = None,
    swap_blocks: bool = False,
    square: bool = False,
    variant: str = "fa2",
    kv_order: str = "forward",
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    return_lse: bool = False,
):
    """Tiled attention (B, H, N, d) x (B, G, S, d) x (B, G, S, dv) -> (B, H, N, dv) in the carrier.

    Tiles come from ``block_q``/``block_k`` or ``sram`` (see :mod:`attnum.attention.tiles`);
    ``return_lse`` also returns the log-sum-exp per row (B, H, N), float64 holding ``lse``-site values.
    Inputs are rounded once to the ``inputs`` format from their own dtype (:func:`steps.load_input`).
    """
    policy = parse_policy(policy)
    if policy.lowbit is not None:  # SageAttention's quantized scheme: its own tiles (lowbit.block_k)
        from attnum.attention.sage import sage_attention

        return sage_attention(q, k, v, lowbit=policy.lowbit, policy=policy, attn_mask=attn_mask, is_causal=is_causal,
                              scale=scale, causal_alignment=causal_alignment, window=window, return_lse=return_lse)
    if variant not in VARIANTS:
        raise AttnumInputError(f"variant={variant!r} is not allowed; expected one of {VARIANTS}")
    B, H, _, N, S, d, _ = masks.check_qkv(q, k, v)
    tiles = resolve_tiles(d, block_q=block_q, block_k=block_k, sram=sram, swap_blocks=swap_blocks, square=square)
    kv_tile_order(tiles.Tc(S), kv_order)  # validate before any work
    scale = masks.resolve_scale(scale, d)
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S), causal_alignment=causal_alignment, window=window)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        # Trainable path: same forward, plus the recomputing backward.
        opts = FlashOptions(scale=scale, policy=policy, tiles=tiles, variant=variant, kv_order=kv_order)
        out, lse = FlashAttentionFunction.apply(q, k, v, mk, opts)
        return (out, lse) if return_lse else out
    with steps.elementwise_single_thread():  # the matmuls alone on the caller's threads (flash_forward)
        q_c = steps.load_input(q, policy)
        k_c = masks.expand_kv(steps.load_input(k, policy), H)
        v_c = masks.expand_kv(steps.load_input(v, policy), H)
        out, lse = flash_forward(q_c, k_c, v_c, mk, scale=scale, policy=policy, tiles=tiles,
                                 variant=variant, kv_order=kv_order)
    return (out, lse) if return_lse else out
