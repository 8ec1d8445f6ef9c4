"""torch <-> JAX for the interpret-mode Pallas adapters: tensors through numpy, dtypes kept bit for bit.

bf16 has no numpy dtype of its own; ``ml_dtypes.bfloat16`` (a JAX dependency) is one, so a bf16 tensor
travels as its 16-bit codes, reinterpreted on each side, never through a float32 cast. A JAX function
called from torch autograd goes through :class:`JaxFunction`: forward keeps ``jax.vjp``'s pullback, and
backward hands it dO in the output's dtype, so the kernel's own backward (its ``custom_vjp``) is what
runs. jax keeps 64-bit floats off by default, so float64 is refused rather than silently narrowed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

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
