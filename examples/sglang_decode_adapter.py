"""A serving adapter for SGLang's Triton decode kernel: declared attributes, no attnum import.

``attnum audit triton-interpret:examples/sglang_decode_adapter.py:SGLangDecode`` (docs/audit.md, "The serving
protocol"); needs ``sglang`` importable (installed, or its kernel files fetched and loaded by attnum).
"""
import math

import torch
from sglang.srt.layers.attention.triton_ops.decode_attention import decode_attention_fwd


class SGLangDecode:
    lse_base = "e"
    single_query_only = True  # one query per sequence
    accepts_out = True  # attnum poisons `out` and flags rows left unwritten
    split_rule = "fixed-splits"

    @staticmethod
    def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
               is_causal=True, scale=None, return_lse=False, out=None, lse_out=None):
        if block_table is not None or return_lse:
            raise NotImplementedError("contiguous cache, no LSE")
        B, H, _, d = q.shape
        G, S, dv = k_cache.shape[1], k_cache.shape[2], v_cache.shape[-1]
        lens = cache_seqlens.tolist()
        k = k_cache.permute(0, 2, 1, 3).reshape(B * S, G, d)  # SGLang's token pool
        v = v_cache.permute(0, 2, 1, 3).reshape(B * S, G, dv)
        indptr = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        indices = torch.tensor([b * S + j for b, L in enumerate(lens) for j in range(L)] or [0], dtype=torch.int32)
        o = out[:, :, 0] if out is not None else q.new_empty(B, H, dv)
        logits = torch.empty(B, H, num_splits, dv)
        lse = torch.empty(B, H, num_splits)
        decode_attention_fwd(q[:, :, 0].contiguous(), k.contiguous(), v.contiguous(), o, indptr, indices, logits,
                             lse, torch.full((B,), num_splits, dtype=torch.int32), num_splits,
                             scale or 1 / math.sqrt(d))
        return out if out is not None else o.unsqueeze(2)
