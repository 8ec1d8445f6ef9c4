"""``flashinfer``: ``flashinfer.single_prefill_with_kv_cache`` behind the SDPA signature.

FlashInfer takes one sequence at a time in (N, H, d) / (S, G, d) layout; the batch is looped.
A bool ``attn_mask`` maps to ``custom_mask``; float masks are unsupported. ``causal=True`` is
bottom-right aligned. GQA is native. The -5e4 sentinel bug of flashinfer#4267 lived here before
flashinfer#4401.
"""

from __future__ import annotations

import torch

NAME = "flashinfer"
PACKAGE = "flashinfer"
DEVICES = ("cuda",)
DTYPES = (torch.bfloat16, torch.float16)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    import flashinfer

    if dropout_p:
        raise NotImplementedError("flashinfer adapter: dropout is not supported")
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        raise NotImplementedError("flashinfer takes a bool custom_mask, not an additive float mask")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flashinfer prefill supports fp16/bf16, not {query.dtype}")
    b, n, s = query.shape[0], query.shape[-2], key.shape[-2]
    outs = []
    for i in range(b):
        mask = None
        if attn_mask is not None:
            m = torch.broadcast_to(attn_mask, (b, query.shape[1], n, s))[i]
            if not bool((m == m[:1]).all()):
                raise NotImplementedError("flashinfer custom_mask is shared by all heads")
            mask = m[0].contiguous()
        o = flashinfer.single_prefill_with_kv_cache(
            query[i].transpose(0, 1).contiguous(), key[i].transpose(0, 1).contiguous(),
            value[i].transpose(0, 1).contiguous(), custom_mask=mask, causal=is_causal, sm_scale=scale)
        outs.append(o.transpose(0, 1))
    return torch.stack(outs)
