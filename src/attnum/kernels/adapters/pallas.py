"""JAX Pallas (jax-ml/jax ``jax.experimental.pallas.ops``): its flash attention kernels, run on CPU in
interpret mode, behind the SDPA signature; tensors cross between torch and JAX through numpy with their dtypes
kept bit for bit.

- ``pallas-mha`` -- the GPU kernel ``jax.experimental.pallas.ops.gpu.attention.mha`` (``interpret=True``).
  Layout: ``mha`` takes (B, N, H, d); SDPA passes (B, H, N, d), so tensors are transposed in and out.
  ``scale=None`` becomes ``sm_scale = 1/sqrt(d)`` (``mha``'s own default is 1.0). ``is_causal`` maps to
  ``causal`` (top-left: ``mha`` masks ``q_index >= k_index`` from 0). Refused (NotImplementedError), because
  ``mha`` cannot express them: any ``attn_mask`` (it takes only ``segment_ids``), GQA (one head count for q, k,
  v), a V head dim unlike d, float64 (jax_enable_x64 off), S = 0, and lengths that are not multiples of the
  block (``mha`` itself requires N % min(128, N) == 0 and S % min(128, S) == 0). Backward: ``mha``'s
  ``custom_vjp`` (its Pallas backward kernels), through ``jax.vjp``.
- ``pallas-tpu-flash`` -- the TPU kernel ``jax.experimental.pallas.ops.tpu.flash_attention.flash_attention``
  (TPU interpret mode, ``pltpu.force_tpu_interpret_mode()``). Layout (B, H, N, d), as SDPA. ``scale=None``
  becomes ``sm_scale = 1/sqrt(d)`` (the kernel's default is 1.0). A float ``attn_mask`` is passed as the
  kernel's ``ab`` bias, broadcast to (B, H, N, S) as it requires; a bool mask as ``ab`` = 0 where True and
  -inf where False (SDPA's definition of a bool mask). ``is_causal`` maps to ``causal`` (top-left:
  ``q_index >= k_index``), and may be combined with a mask. Blocks are ``min(128, N)`` and ``min(128, S)`` (the
  defaults, capped at the lengths, as the kernel requires block <= length). Refused (NotImplementedError): GQA,
  a V head dim unlike d, float64, S = 0, and lengths that are not multiples of those blocks. Backward: the
  kernel's ``custom_vjp``, run in interpret mode too; it needs N and S to be multiples of 128 (refused
  otherwise).

torch <-> JAX: bf16 has no numpy dtype of its own; ``ml_dtypes.bfloat16`` (a JAX dependency) is one, so a bf16
tensor travels as its 16-bit codes, reinterpreted on each side, never through a float32 cast. A JAX function
called from torch autograd goes through :class:`JaxFunction`: forward keeps ``jax.vjp``'s pullback, and
backward hands it dO in the output's dtype, so the kernel's own backward (its ``custom_vjp``) is what runs. jax
keeps 64-bit floats off by default, so float64 is refused rather than silently narrowed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch

from attnum.kernels.protocol import sdpa_kernel

PACKAGE = "jax"  # find_spec("jax") imports nothing; jax.experimental.pallas ships in jax >= 0.4.31
EXTRA = "jax"  # the pyproject extra that installs it
BLOCK = 128  # mha's BlockSizes.get_default() (block_q = block_k = 128); the TPU kernel's every block 128


# -- torch <-> JAX -----------------------------------------------------------------------------------------

JAX_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def to_jax(x: torch.Tensor):
    """A CPU tensor as a jax array of the same dtype and values."""
    import jax.numpy as jnp
    import ml_dtypes

    x = x.detach().to("cpu").contiguous()
    if x.dtype == torch.bfloat16:
        return jnp.asarray(x.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
    if x.dtype not in JAX_DTYPES and x.dtype != torch.bool:
        raise NotImplementedError(f"jax adapters take {[str(d) for d in JAX_DTYPES]}, not {x.dtype} "
                                  "(jax_enable_x64 is off)")
    return jnp.asarray(x.numpy())


def to_torch(a) -> torch.Tensor:
    """A jax array as a CPU tensor of the same dtype and values."""
    import ml_dtypes
    import numpy as np

    a = np.asarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


class JaxFunction(torch.autograd.Function):
    """``f(q, k, v) -> out`` in JAX as a torch op whose backward is JAX's vjp of ``f``; both run inside
    ``mode()`` (a context manager such as Pallas TPU's interpret mode, which the pullback needs too)."""

    @staticmethod
    def forward(ctx, f: Callable, mode: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        import jax

        with mode():
            out, ctx.pullback = jax.vjp(f, to_jax(q), to_jax(k), to_jax(v))
        out = to_torch(out)
        ctx.out_dtype, ctx.mode = out.dtype, mode
        return out

    @staticmethod
    def backward(ctx, d_out: torch.Tensor):
        with ctx.mode():
            dq, dk, dv = ctx.pullback(to_jax(d_out.to(ctx.out_dtype)))
        return None, None, to_torch(dq), to_torch(dk), to_torch(dv)


def call(f: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
         mode: Callable = contextlib.nullcontext) -> torch.Tensor:
    """``f`` on torch tensors, inside ``mode()``; differentiable when an input requires grad."""
    if q.device.type != "cpu":
        raise NotImplementedError(f"interpret-mode Pallas runs on CPU tensors, not {q.device}")
    for x in (q, k, v):
        if x.dtype not in JAX_DTYPES:
            raise NotImplementedError(f"jax adapters take {[str(d) for d in JAX_DTYPES]}, not {x.dtype} "
                                      "(jax_enable_x64 is off)")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        return JaxFunction.apply(f, mode, q, k, v)
    with mode():
        return to_torch(f(to_jax(q), to_jax(k), to_jax(v)))


# -- jax.experimental.pallas.ops.gpu.attention.mha -------------------------------------------------------

def _refuse_shapes(query, key, value, attn_mask, enable_gqa) -> None:
    n, s = query.shape[-2], key.shape[-2]
    if attn_mask is not None:
        raise NotImplementedError("pallas mha takes no attn_mask or bias (only segment_ids)")
    if key.shape[1] != query.shape[1]:
        raise NotImplementedError("pallas mha needs as many kv heads as query heads (no GQA)")
    if value.shape[-1] != query.shape[-1]:
        raise NotImplementedError("pallas mha needs the V head dim equal to d")
    if s == 0 or n == 0:
        raise NotImplementedError("pallas mha needs at least one query and one key")
    for name, length in (("N", n), ("S", s)):
        if length % min(BLOCK, length):
            raise NotImplementedError(f"pallas mha needs {name}={length} to be a multiple of its block "
                                      f"{min(BLOCK, length)}")


def mha_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from jax.experimental.pallas.ops.gpu.attention import mha

    if dropout_p:
        raise NotImplementedError("pallas mha adapter: dropout is not supported")
    _refuse_shapes(query, key, value, attn_mask, enable_gqa)
    sm_scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)

    def f(q, k, v):  # (B, H, N, d) in, (B, H, N, d) out; mha works on (B, N, H, d)
        out = mha(q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), None, sm_scale=sm_scale,
                  causal=bool(is_causal), interpret=True)
        return out.swapaxes(1, 2)

    return call(f, query, key, value)


# -- jax.experimental.pallas.ops.tpu.flash_attention ------------------------------------------------------

def _tpu_bias(attn_mask, query, key) -> torch.Tensor | None:
    """(B, H, N, S) additive bias in the query's dtype, or None."""
    if attn_mask is None:
        return None
    b, h, n, s = query.shape[0], query.shape[1], query.shape[-2], key.shape[-2]
    if attn_mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=query.dtype)
        attn_mask = torch.where(attn_mask.cpu(), zero, torch.full((), -math.inf, dtype=query.dtype))
    return attn_mask.to("cpu", query.dtype).expand(b, h, n, s).contiguous()


def tpu_flash_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
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
    bias = _tpu_bias(attn_mask, query, key)
    ab = to_jax(bias) if bias is not None else None

    def f(q, k, v):
        return flash_attention(q, k, v, ab, causal=bool(is_causal), sm_scale=sm_scale, block_sizes=blocks)

    # The backward's pallas_calls are traced when the pullback runs: interpret mode must hold then too.
    return call(f, query, key, value, mode=pltpu.force_tpu_interpret_mode)


# Both interpret on CPU: audit targets, left out of a sweep's "all". Both mask q_index >= k_index, both from 0
# (top-left); mha's rows always keep key 0, so no row is empty, and the TPU kernel's mask_value is finite.
KERNELS = (
    sdpa_kernel("pallas-mha", mha_sdpa, package=PACKAGE, devices=("cpu",), dtypes=JAX_DTYPES,
                doc="``pallas-mha``: JAX's Pallas GPU flash attention ``mha``, run on CPU in interpret mode, behind the "
                    "SDPA signature.",
                causal_alignment="top_left", interpreted=True, extra=EXTRA),
    sdpa_kernel("pallas-tpu-flash", tpu_flash_sdpa, package=PACKAGE, devices=("cpu",), dtypes=JAX_DTYPES,
                doc="``pallas-tpu-flash``: JAX's Pallas TPU ``flash_attention``, run on CPU in TPU interpret mode, behind "
                    "the SDPA signature.",
                causal_alignment="top_left", interpreted=True, extra=EXTRA),
)
