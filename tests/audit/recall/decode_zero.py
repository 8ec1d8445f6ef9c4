"""A split-KV decode kernel as a user writes one (no attnum import): stage 1 writes each split's
(sum e^s V, max, sum e^s), stage 2 merges the splits and divides. ``broken`` divides by the sum as vLLM's and
SGLang's Triton ``decode_attention_fwd`` stage 2 does (``acc / e_sum``): a sequence of length 0 (a CUDA-graph
pad slot) gives 0 / 0 = NaN (vllm-project/vllm#57017, PR #57094 open). ``fixed`` writes 0 there."""

import math

import torch


def _decode(q, k_cache, v_cache, cache_seqlens, num_splits, scale, guard):
    B, H, N, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.empty(B, H, N, v_cache.shape[-1])
    for b in range(B):
        L = int(cache_seqlens[b])
        g = H // k_cache.shape[1]
        k = k_cache[b, :, :L].float().repeat_interleave(g, 0)
        v = v_cache[b, :, :L].float().repeat_interleave(g, 0)
        acc, e_sum, e_max = torch.zeros(H, N, v.shape[-1]), torch.zeros(H, N, 1), torch.full((H, N, 1), -math.inf)
        per = max(1, math.ceil(L / max(1, num_splits)))
        for s0 in range(0, L, per):  # stage 1 per split, merged in stage 2
            s = (q[b].float() @ k[:, s0:s0 + per].transpose(-1, -2)) * scale
            m = torch.maximum(e_max, s.amax(-1, keepdim=True))
            p = torch.exp(s - m)
            r = torch.exp(e_max - m)
            acc = acc * r + p @ v[:, s0:s0 + per]
            e_sum = e_sum * r + p.sum(-1, keepdim=True)
            e_max = m
        out[b] = torch.where(e_sum == 0, 0.0, acc / e_sum) if guard else acc / e_sum  # 0 / 0 at L = 0
    return out.to(q.dtype)


class broken:  # noqa: N801 - the audit names it broken / fixed
    single_query_only = True

    @staticmethod
    def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
               is_causal=True, scale=None, return_lse=False):
        if block_table is not None or return_lse or q.shape[2] != 1:
            raise NotImplementedError("contiguous cache, one query, no LSE")
        return _decode(q, k_cache, v_cache, cache_seqlens, num_splits, scale, guard=False)


class fixed(broken):  # noqa: N801
    @staticmethod
    def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
               is_causal=True, scale=None, return_lse=False):
        if block_table is not None or return_lse or q.shape[2] != 1:
            raise NotImplementedError("contiguous cache, one query, no LSE")
        return _decode(q, k_cache, v_cache, cache_seqlens, num_splits, scale, guard=True)
