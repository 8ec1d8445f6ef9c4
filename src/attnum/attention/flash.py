"""FlashAttention's tiled attention, every rounding site named: the public entry :func:`flash_attention`.

The forward kernel (Algorithms 1 of FlashAttention and FlashAttention-2, the variants, Qiu & Yao's
max shift) is :mod:`attnum.attention.flash_forward`; the recomputing backward and its autograd
Function are :mod:`attnum.attention.flash_backward`. This module loads the inputs once and runs the
forward alone, or both when a gradient is wanted (it imports both; neither imports it).

Shape alphabet: B batch, H heads, G kv heads, N queries, S keys, d head dim, dv value dim.
"""

from __future__ import annotations

import math

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
    if policy.lowbit is not None or policy.exp2 != "native":
        # The low-bit schemes and FA4's polynomial exp2 index by tiles and scale blocks: an empty Q or K
        # gets golden's answer, and an input they cannot compute is one AttnumInputError naming it.
        B, H, _, N, S, _, dv = masks.check_qkv(q, k, v)
        if N == 0 or S == 0:  # golden: no rows, or rows with no key (zeros; LSE -inf)
            out = torch.zeros(B, H, N, dv, dtype=policy.carrier, device=q.device)
            lse = torch.full((B, H, N), -math.inf, dtype=torch.float64, device=q.device)
            return (out, lse) if return_lse else out
        try:
            return _flash(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, policy=policy,
                          block_q=block_q, block_k=block_k, sram=sram, swap_blocks=swap_blocks, square=square,
                          variant=variant, kv_order=kv_order, causal_alignment=causal_alignment, window=window,
                          return_lse=return_lse)
        except AttnumInputError:
            raise
        except (RuntimeError, IndexError, ValueError, ArithmeticError) as exc:
            raise _edge_input_error(policy, q, k, v, exc) from None
    return _flash(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, policy=policy, block_q=block_q,
                  block_k=block_k, sram=sram, swap_blocks=swap_blocks, square=square, variant=variant,
                  kv_order=kv_order, causal_alignment=causal_alignment, window=window, return_lse=return_lse)


def _edge_input_error(policy: Policy, q, k, v, exc: BaseException) -> AttnumInputError:
    """The one-line error for an input ``policy`` cannot compute: the first of q, k, v that is not finite
    in the policy's input format (inf, NaN, or past its largest value), else the shapes."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        xr = steps.load_input(x.detach(), policy)
        if not bool(torch.isfinite(xr).all()):
            what = "NaN" if bool(torch.isnan(xr).any()) else f"inf (or values past {policy.inputs.name}'s range)"
            return AttnumInputError(f"{name} holds {what}, which policy={policy.name or 'low-bit'} cannot quantize or "
                                    f"compute ({type(exc).__name__}); expected finite inputs within "
                                    f"{policy.inputs.name}'s range for this scheme")
    why = (str(exc).splitlines() or [""])[0][:120]
    return AttnumInputError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} are not allowed for "
                            f"policy={policy.name or 'low-bit'} ({type(exc).__name__}: {why})")


def _flash(q, k, v, *, attn_mask, is_causal, scale, policy: Policy, block_q, block_k, sram, swap_blocks, square,
           variant, kv_order, causal_alignment, window, return_lse):
    """:func:`flash_attention` after its policy is parsed (same arguments)."""
    if policy.lowbit is not None:  # SageAttention's quantized scheme: its own tiles (lowbit.block_k)
        from attnum.attention.lowbit.sage import sage_attention

        return sage_attention(q, k, v, lowbit=policy.lowbit, policy=policy, attn_mask=attn_mask, is_causal=is_causal,
                              scale=scale, causal_alignment=causal_alignment, window=window, return_lse=return_lse)
    if variant not in VARIANTS:
        raise AttnumInputError(f"variant={variant!r} is not allowed; expected one of {VARIANTS}")
    if variant == "fa1" and policy.acc_update != "each":  # fa1 writes O normalized per tile: no such update
        raise AttnumInputError(f"policy acc_update={policy.acc_update!r} is not allowed with variant='fa1'; "
                               "expected acc_update=each (once is fa2's O update)")
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
