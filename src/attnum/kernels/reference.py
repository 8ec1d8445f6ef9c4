"""attnum's own attention implementations behind the SDPA signature.

- ``golden``: :func:`attnum.attention.golden.golden_attention`, exact semantics in float64
  (differentiable: float64 autograd straight through it);
- ``eager``: :func:`attnum.attention.eager.eager_attention`, softmax(QK^T) V op by op in the input
  dtype; it honours autocast (the paper's baseline, and its bf16-autocast run);
- ``baseline:POLICY``: :func:`attnum.attention.baseline.baseline_attention`, every site rounded per
  ``POLICY`` (any string :func:`attnum.numerics.policy.parse_policy` accepts, e.g. ``baseline:fp32``);
- ``flash:POLICY``: :func:`attnum.attention.flash.flash_attention` with optional ``block_q`` /
  ``block_k`` tiles (e.g. ``flash:fa2:bf16,acc=fp16``), trainable through its recomputing backward.

The math lives in ``attnum.attention``; these wrappers only adapt the call. The emulations run with
autocast off (autocast would turn the float32 carrier's matmuls into bf16 ones, silently changing the
arithmetic the policy describes), return ``query.dtype`` (the carrier is float32 or float64), and
refuse ``dropout_p != 0`` (they are deterministic). GQA (fewer kv heads) is accepted whatever
``enable_gqa`` says.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnum.attention.baseline import baseline_attention
from attnum.attention.eager import eager_attention
from attnum.attention.flash import flash_attention
from attnum.attention.golden import golden_attention
from attnum.errors import AttnumInputError
from attnum.numerics.policy import parse_policy

SdpaFn = Callable[..., torch.Tensor]
NAMES = ("golden", "eager")
FAMILIES = ("baseline", "flash")  # NAME:POLICY


def _emulation(name: str, impl: Callable, **options) -> SdpaFn:
    """``impl(q, k, v, *, attn_mask, is_causal, scale, **options)`` behind the SDPA signature."""

    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
        if dropout_p:
            raise AttnumInputError(f"dropout_p={dropout_p} is not allowed for {name}; expected 0.0")
        with torch.autocast(device_type=query.device.type, enabled=False):
            out = impl(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale, **options)
        return out.to(query.dtype)

    attention.__name__ = attention.__qualname__ = name
    return attention


def builtin(name: str) -> SdpaFn:
    """``golden`` or ``eager``."""
    if name == "eager":
        return eager_attention
    if name == "golden":
        return _emulation("golden", golden_attention)
    raise AttnumInputError(f"attention={name!r} is not allowed; expected one of {NAMES}")


def family(kind: str, policy: str, *, block_q: int | None = None, block_k: int | None = None) -> SdpaFn:
    """``baseline:POLICY`` or ``flash:POLICY`` (tiles apply to flash only); a bad policy fails here."""
    parsed = parse_policy(policy)
    if kind == "baseline":
        return _emulation(f"baseline:{policy}", baseline_attention, policy=parsed)
    if kind == "flash":
        return _emulation(f"flash:{policy}", flash_attention, policy=parsed, block_q=block_q, block_k=block_k)
    raise AttnumInputError(f"attention={kind}:{policy!r} is not allowed; expected one of "
                           f"{[f + ':POLICY' for f in FAMILIES]}")
