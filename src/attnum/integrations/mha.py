"""``F.multi_head_attention_forward`` as in-projection + any SDPA-signature callable + out-projection.

A TorchFunctionMode sees ``nn.MultiheadAttention``'s call to ``F.multi_head_attention_forward`` but
not the SDPA call inside it, so ``attnum.integrations.shadow`` re-expresses the call here and hands the attention
to its comparing SDPA. Layout in: (L, B, E) query, (S, B, E) key/value (the module has already
transposed batch_first inputs). Masks follow nn.MultiheadAttention: a bool ``attn_mask`` or
``key_padding_mask`` marks positions *not* to attend (the opposite of SDPA's bool mask).

Unsupported features (``bias_k``/``bias_v``, ``add_zero_attn``, ``static_k``/``static_v``, dropout
while training) fall back to the original function, unrecorded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnum.attention.eager import attention_weights

_PARAMS = list(inspect.signature(F.multi_head_attention_forward).parameters)


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    return mask.to(dtype)


def mha_forward_via_sdpa(args: tuple, kwargs: dict, sdpa: Callable) -> tuple[torch.Tensor, torch.Tensor | None]:
    a = dict(zip(_PARAMS, args))
    a.update(kwargs)
    for name, p in inspect.signature(F.multi_head_attention_forward).parameters.items():
        a.setdefault(name, p.default)
    unsupported = (a["bias_k"] is not None or a["bias_v"] is not None or a["add_zero_attn"]
                   or a["static_k"] is not None or a["static_v"] is not None
                   or (a["training"] and a["dropout_p"] > 0))
    if unsupported:
        return F.multi_head_attention_forward(*args, **kwargs)
    query, key, value = a["query"], a["key"], a["value"]
    batched = query.dim() == 3
    if not batched:  # (L, E) unbatched input
        query, key, value = query[:, None], key[:, None], value[:, None]
    L, B, E = query.shape
    S = key.shape[0]
    H = a["num_heads"]
    hd = E // H
    if a["use_separate_proj_weight"]:
        wq, wk, wv = a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"]
    else:
        wq, wk, wv = a["in_proj_weight"].chunk(3)
    bq = bk = bv = None
    if a["in_proj_bias"] is not None:
        bq, bk, bv = a["in_proj_bias"].chunk(3)
    q_BHLd = F.linear(query, wq, bq).view(L, B, H, hd).permute(1, 2, 0, 3)
    k_BHSd = F.linear(key, wk, bk).view(S, B, H, hd).permute(1, 2, 0, 3)
    v_BHSd = F.linear(value, wv, bv).view(S, B, H, -1).permute(1, 2, 0, 3)
    mask = None
    if a["attn_mask"] is not None:
        m = _additive(a["attn_mask"], q_BHLd.dtype)
        mask = m.view(B, H, L, S) if m.dim() == 3 else m  # (B*H, L, S) or (L, S)
    if a["key_padding_mask"] is not None:
        kp = _additive(a["key_padding_mask"], q_BHLd.dtype)
        kp = kp.view(B, 1, 1, S) if batched else kp.view(1, 1, 1, S)
        mask = kp if mask is None else mask + kp
    is_causal = bool(a["is_causal"]) and mask is None
    o_BHLd = sdpa(q_BHLd, k_BHSd, v_BHSd, attn_mask=mask, dropout_p=0.0, is_causal=is_causal)
    o_LBE = o_BHLd.permute(2, 0, 1, 3).reshape(L, B, -1)
    out = F.linear(o_LBE, a["out_proj_weight"], a["out_proj_bias"])
    weights = None
    if a["need_weights"]:
        # Returned weights come from plain softmax, as nn.MultiheadAttention computes them.
        weights = attention_weights(q_BHLd, k_BHSd, attn_mask=mask, is_causal=is_causal)
        if a["average_attn_weights"]:
            weights = weights.mean(dim=1)
        if not batched:
            weights = weights[0]
    if not batched:
        out = out[:, 0]
    return out, weights
