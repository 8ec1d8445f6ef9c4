"""``pallas-mha``: JAX's Pallas GPU flash attention ``jax.experimental.pallas.ops.gpu.attention.mha``, run
on CPU in interpret mode (``interpret=True``), behind the SDPA signature.

Layout: ``mha`` takes (B, N, H, d); SDPA passes (B, H, N, d), so tensors are transposed in and out
(through numpy, dtypes kept: :mod:`attnum.kernels.jax_bridge`). ``scale=None`` becomes
``sm_scale = 1/sqrt(d)`` (``mha``'s own default is 1.0). ``is_causal`` maps to ``causal`` (top-left:
``mha`` masks ``q_index >= k_index`` from 0). Refused (NotImplementedError), because ``mha`` cannot
express them: any ``attn_mask`` (it takes only ``segment_ids``), GQA (one head count for q, k, v), a
V head dim unlike d, float64 (jax_enable_x64 off), S = 0, and lengths that are not multiples of the
block (``mha`` itself requires N % min(128, N) == 0 and S % min(128, S) == 0). Backward: ``mha``'s
``custom_vjp`` (its Pallas backward kernels), through ``jax.vjp``.
"""

from __future__ import annotations

import math

from attnum.kernels import jax_bridge

NAME = "pallas-mha"
PACKAGE = "jax"  # find_spec("jax") imports nothing; jax.experimental.pallas ships in jax >= 0.4.31
EXTRA = "jax"
DEVICES = ("cpu",)
INTERPRETED = True  # interpret mode on CPU: an audit target, left out of a sweep's "all"
DTYPES = jax_bridge.JAX_DTYPES
# mha masks q_index >= k_index, both from 0; a row always keeps key 0, so no row is empty
CAUSAL_ALIGNMENT = "top_left"
BLOCK = 128  # mha's BlockSizes.get_default(): block_q = block_k = 128


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


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from jax.experimental.pallas.ops.gpu.attention import mha

    if dropout_p:
        raise NotImplementedError("pallas mha adapter: dropout is not supported")
    _refuse_shapes(query, key, value, attn_mask, enable_gqa)
    sm_scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)

    def f(q, k, v):  # (B, H, N, d) in, (B, H, N, d) out; mha works on (B, N, H, d)
        out = mha(q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), None, sm_scale=sm_scale,
                  causal=bool(is_causal), interpret=True)
        return out.swapaxes(1, 2)

    return jax_bridge.call(f, query, key, value)
