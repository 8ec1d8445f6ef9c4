"""A paged decode / chunked-prefill kernel as a user writes one (no attnum import). Causal calls stop at each
query's last key; ``broken``'s non-causal calls loop to the end of the last page and mask the slots past
``seq_len`` in the scores only, as vLLM's unified attention did until vLLM 0.25 (vllm-project/vllm PR #47305):
0 * NaN from the unwritten page tail. ``fixed`` never reads past ``seq_len``."""

import math

import torch


def _decode(q, k_cache, v_cache, cache_seqlens, block_table, is_causal, scale, guard):
    B, H, N, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.zeros(B, H, N, v_cache.shape[-1])
    for b in range(B):
        L = int(cache_seqlens[b])
        if L == 0:
            continue
        if block_table is None:
            k, v = k_cache[b].transpose(0, 1), v_cache[b].transpose(0, 1)  # (S, G, d)
        else:
            P = k_cache.shape[1]
            pages = block_table[b, :math.ceil(L / P)].long()
            k, v = k_cache[pages].flatten(0, 1), v_cache[pages].flatten(0, 1)  # whole pages: (n P, G, d)
        width = L if (guard or is_causal) else k.shape[0]  # the bug: non-causal reads to the page end
        k, v = k[:width].float(), v[:width].float()
        g = H // k.shape[1]
        k, v = k.repeat_interleave(g, 1).transpose(0, 1), v.repeat_interleave(g, 1).transpose(0, 1)  # (H, w, d)
        s = (q[b].float() @ k.transpose(-1, -2)) * scale  # (H, N, w)
        j = torch.arange(width)[None, :]
        keep = j < L
        if is_causal:
            keep = keep & (j <= torch.arange(N)[:, None] + L - N)
        s = s.masked_fill(~keep, -math.inf)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        out[b] = p @ v
    return out.to(q.dtype)


class broken:  # noqa: N801 - the audit names it broken / fixed
    @staticmethod
    def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
               is_causal=True, scale=None, return_lse=False):
        if return_lse:
            raise NotImplementedError("no LSE")
        return _decode(q, k_cache, v_cache, cache_seqlens, block_table, is_causal, scale, guard=False)


class fixed:  # noqa: N801
    @staticmethod
    def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
               is_causal=True, scale=None, return_lse=False):
        if return_lse:
            raise NotImplementedError("no LSE")
        return _decode(q, k_cache, v_cache, cache_seqlens, block_table, is_causal, scale, guard=True)
