"""HuggingFace transformers: any SDPA-signature attention as an ``attn_implementation``.

    from attnum.integrations import hf
    hf.register("attnum-fa2", "flash:fa2:bf16")
    model.set_attn_implementation("attnum-fa2")   # or config._attn_implementation / from_config(...)

The attention function *and* a mask function are registered under the same name: transformers
passes ``attention_mask=None`` to a custom attention whose name has no mask function, which silently
drops causal and padding masks. The mask registered is ``eager_mask`` (additive float, 0 / dtype
min, shape (B, 1, N, S)), which every SDPA-signature callable accepts and which is never None.

Function signature (transformers >= 4.53): ``fn(module, query, key, value, attention_mask, dropout=0.0,
scaling=None, is_causal=None, **kwargs) -> (out (B, N, H, d), None)`` with query (B, H, N, d) and
key/value (B, G, S, d).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnum.errors import AttnumInputError
from attnum.kernels.registry import require


def attention_function(attention: Any) -> Callable:
    """The transformers-signature wrapper around an SDPA-signature attention (or any name
    :mod:`attnum.kernels.registry` resolves)."""
    sdpa = require(attention).fn

    def attnum_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                         **kwargs):
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = attention_mask[:, :, :, : key.shape[-2]]
        if is_causal is None:
            is_causal = query.shape[2] > 1 and attention_mask is None and getattr(module, "is_causal", True)
        out = sdpa(query, key, value, attn_mask=attention_mask, dropout_p=dropout if module.training else 0.0,
                   is_causal=bool(is_causal), scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
        return out.transpose(1, 2).contiguous(), None

    return attnum_attention


def register(name: str, attention: Any) -> str:
    """Register ``attention`` under ``name`` with AttentionInterface and AttentionMaskInterface.

    ``name`` must not contain "flash": transformers treats such names as flash-attention kernels
    to import from the Hub.
    """
    if "flash" in name.lower():
        raise AttnumInputError(f"name={name!r} is not allowed; transformers reserves names containing 'flash'")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(name, attention_function(attention))
    AttentionMaskInterface.register(name, eager_mask)
    return name

