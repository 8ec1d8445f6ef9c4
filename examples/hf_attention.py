"""HF transformers' attention functions behind SDPA's signature, for ``attnum audit`` (docs/audit.md,
"torch's CPU backends and HF transformers"). Needs ``pip install transformers``.

    attnum audit examples/hf_attention.py:sdpa_attention --dtype bf16,fp16,fp32
    attnum audit examples/hf_attention.py:eager_attention --dtype bf16,fp16,fp32

HF never receives SDPA's ``is_causal`` with a mask: its mask utilities build one 4-D mask, causal
bottom-right (the queries are the last positions of the cache), and the eager path adds it to the
scores as ``finfo(dtype).min`` where a key is masked. These wrappers build the mask the same way and
declare what follows from it: bottom-right causal alignment for both, and for eager the mean of V on a
row whose every key is masked (a row of finfo.min scores is a uniform softmax).
"""

from __future__ import annotations

import math

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.llama.modeling_llama import eager_attention_forward


class _Layer(torch.nn.Module):
    """What the HF functions read off the attention module."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups, self.is_causal = groups, True
        self.train(False)


def _allowed(query, key, attn_mask, is_causal):
    """A bool mask (True = attend) of shape (B or 1, H or 1, N, S), or None; or the additive mask as is."""
    N, S = query.shape[-2], key.shape[-2]
    causal = torch.ones(N, S, dtype=torch.bool).tril(diagonal=S - N) if is_causal else None  # bottom-right
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        if causal is None:
            return attn_mask
        return attn_mask.masked_fill(~causal, float("-inf"))
    if attn_mask is None:
        return causal
    return attn_mask if causal is None else attn_mask & causal


def _call(fn, query, key, value, attn_mask, is_causal, scale, additive: bool):
    groups = query.shape[1] // key.shape[1]
    mask = _allowed(query, key, attn_mask, is_causal)
    if additive and mask is not None and mask.dtype == torch.bool:  # HF's eager masks: finfo.min, never -inf
        mask = torch.zeros(mask.shape, dtype=query.dtype).masked_fill(~mask, torch.finfo(query.dtype).min)
    scaling = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    kw = {"is_causal": bool(is_causal) and mask is None} if fn is sdpa_attention_forward else {}
    out, _ = fn(_Layer(groups), query, key, value, mask, scaling=scaling, dropout=0.0, **kw)
    return out.transpose(1, 2)  # HF returns (B, N, H, d)


def sdpa_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _call(sdpa_attention_forward, query, key, value, attn_mask, is_causal, scale, additive=False)


def eager_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _call(eager_attention_forward, query, key, value, attn_mask, is_causal, scale, additive=True)


sdpa_attention.attnum_causal_alignment = "bottom_right"
eager_attention.attnum_causal_alignment = "bottom_right"
eager_attention.attnum_empty_rows = "mean-v"
