"""``pallas-tpu-flash``: JAX's Pallas TPU ``jax.experimental.pallas.ops.tpu.flash_attention.flash_attention``,
run on CPU in TPU interpret mode (``pltpu.force_tpu_interpret_mode()``), behind the SDPA signature.

Layout (B, H, N, d), as SDPA. ``scale=None`` becomes ``sm_scale = 1/sqrt(d)`` (the kernel's default is
1.0). A float ``attn_mask`` is passed as the kernel's ``ab`` bias, broadcast to (B, H, N, S) as it
requires; a bool mask as ``ab`` = 0 where True and -inf where False (SDPA's definition of a bool
mask). ``is_causal`` maps to ``causal`` (top-left: ``q_index >= k_index``), and may be combined with a
mask. Blocks are ``min(128, N)`` and ``min(128, S)`` (the defaults, capped at the lengths, as the kernel
requires block <= length). Refused (NotImplementedError): GQA, a V head dim unlike d, float64, S = 0,
and lengths that are not multiples of those blocks. Backward: the kernel's ``custom_vjp``, run in interpret
mode too; it needs N and S to be multiples of 128 (refused otherwise).
"""

from __future__ import annotations

import math

import torch

from attnum.kernels import jax_bridge

NAME = "pallas-tpu-flash"
PACKAGE = "jax"
EXTRA = "jax"
DEVICES = ("cpu",)
INTERPRETED = True  # interpret mode on CPU: an audit target, left out of a sweep's "all"
DTYPES = jax_bridge.JAX_DTYPES
# the causal mask is q_index >= k_index, both from 0 (the kernel's mask_value is finite)
CAUSAL_ALIGNMENT = "top_left"
BLOCK = 128  # BlockSizes.get_default(): every block 128


def _bias(attn_mask, query, key) -> torch.Tensor | None:
    """(B, H, N, S) additive bias in the query's dtype, or None."""
    if attn_mask is None:
        return None
    b, h, n, s = query.shape[0], query.shape[1], query.shape[-2], key.shape[-2]
    if attn_mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=query.dtype)
        attn_mask = torch.where(attn_mask.cpu(), zero, torch.full((), -math.inf, dtype=query.dtype))
    return attn_mask.to("cpu", query.dtype).expand(b, h, n, s).contiguous()


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

    n, s = query.shape[-2], key.shape[-2]
    if dropout_p:
        raise NotImplementedError("pallas tpu flash_attention adapter: dropout is not supported")
    if key.shape[1] != query.shape[1]:
        raise NotImplementedError("pallas tpu flash_attention needs as many kv heads as query heads (no GQA)")
    if value.shape[-1] != query.shape[-1]:
        raise NotImplementedError("pallas tpu flash_attention needs the V head dim equal to d")
    if n == 0 or s == 0:
        raise NotImplementedError("pallas tpu flash_attention needs at least one query and one key")
    bq, bk = min(BLOCK, n), min(BLOCK, s)
    if n % bq or s % bk:
        raise NotImplementedError(f"pallas tpu flash_attention needs N={n} and S={s} to be multiples of "
                                  f"its blocks ({bq}, {bk})")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value)) and (n % BLOCK or s % BLOCK):
        # Its backward keeps the l, m residuals 128 lanes wide (MIN_BLOCK_SIZE): shorter blocks fail inside.
        raise NotImplementedError(f"pallas tpu flash_attention's backward needs N={n} and S={s} to be multiples "
                                  f"of {BLOCK}")
    blocks = BlockSizes(block_q=bq, block_k_major=bk, block_k=bk, block_b=1, block_q_major_dkv=bq,
                        block_k_major_dkv=bk, block_k_dkv=bk, block_q_dkv=bq, block_k_major_dq=bk,
                        block_k_dq=bk, block_q_dq=bq)
    sm_scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    bias = _bias(attn_mask, query, key)
    ab = jax_bridge.to_jax(bias) if bias is not None else None

    def f(q, k, v):
        return flash_attention(q, k, v, ab, causal=bool(is_causal), sm_scale=sm_scale, block_sizes=blocks)

    # The backward's pallas_calls are traced when the pullback runs: interpret mode must hold then too.
    return jax_bridge.call(f, query, key, value, mode=pltpu.force_tpu_interpret_mode)
