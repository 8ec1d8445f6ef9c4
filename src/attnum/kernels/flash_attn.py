"""``flash-attn``: Dao-AILab's ``flash_attn_func`` behind the SDPA signature.

Layout: flash-attn takes (B, N, H, d); SDPA passes (B, H, N, d), so tensors are transposed in and
out. GQA is native (fewer kv heads). There is no arbitrary mask argument, so an ``attn_mask`` is
unsupported (not an error), as are fp32 inputs. ``causal=True`` is bottom-right aligned since
flash-attn 2.1; the causal-alignment probe reports that rather than failing it. ``varlen`` is the serving
protocol's variable-length entry point through ``flash_attn_varlen_func`` (the varlen-ragged probe).
"""

from __future__ import annotations

import torch

NAME = "flash-attn"
PACKAGE = "flash_attn"
DEVICES = ("cuda",)
DTYPES = (torch.bfloat16, torch.float16)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from flash_attn import flash_attn_func

    if attn_mask is not None:
        raise NotImplementedError("flash_attn_func takes no attn_mask")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flash_attn_func supports fp16/bf16, not {query.dtype}")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise ValueError("kv heads differ from query heads but enable_gqa=False")
    out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                          dropout_p=dropout_p, softmax_scale=scale, causal=is_causal)
    return out.transpose(1, 2)


def varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
           scale=None):
    """attnum's varlen protocol -> ``flash_attn_varlen_func`` (the same packed layout: q (Tq, H, d), k, v
    (Tk, G, d), int32 cumulative lengths; causal bottom-right; a row with no key gives zeros)."""
    from flash_attn import flash_attn_varlen_func

    if q.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError(f"flash_attn_varlen_func supports fp16/bf16, not {q.dtype}")
    lens_q, lens_k = (c[1:] - c[:-1] for c in (cu_seqlens_q, cu_seqlens_k))
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q.to(torch.int32), cu_seqlens_k.to(torch.int32),
                                  int(max_seqlen_q if max_seqlen_q is not None else lens_q.max()),
                                  int(max_seqlen_k if max_seqlen_k is not None else lens_k.max()),
                                  softmax_scale=scale, causal=is_causal)


sdpa.varlen = varlen  # the serving protocol's varlen entry point (attnum.kernels.serving)
