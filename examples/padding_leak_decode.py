"""A decode kernel that reads whole pages and masks the padding with -inf scores: 0 * NaN leaks.

BUGGY ON PURPOSE - an audit target for ``attnum audit examples/padding_leak_decode.py:target``.

Keys past a sequence's length get score -inf, so their probability is exactly 0, but their V rows are
still read: when the padding holds NaN (never-written cache memory) the PV product is 0 * NaN = NaN
(flash-attention#1745, #2374). Only the slots of pages a sequence owns are read, never block-table
entries past its last page. Everything else (bottom-right causal, empty rows, natural LSE) is right,
and split counts are ignored (one pass), so it fails ``page-padding-leak`` only.
"""

from __future__ import annotations

import math

import torch

from attnum.kernels.serving import ServingTarget


def _gather_whole_pages(pages, row, L):
    """The bug's read: every slot of the ceil(L / P) pages, the last page's tail past L included."""
    P = pages.shape[1]
    n = math.ceil(L / P)
    kv = pages[row[:n].long()].flatten(0, 1)  # (n * P, G, d): includes the tail past L
    return kv.transpose(0, 1), n * P


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None,
           is_causal=True, scale=None, return_lse=False):
    """q (B, H, N, d); cache (B, G, S, d) or pages (n_pages, P, G, d) with a block table."""
    B, H, N, d = q.shape
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    outs, lses = [], []
    for b in range(B):
        L = int(cache_seqlens[b])
        if block_table is None:
            k, v, width = k_cache[b], v_cache[b], k_cache.shape[2]  # the whole cache row, padding too
        else:
            k, width = _gather_whole_pages(k_cache, block_table[b], L)
            v, _ = _gather_whole_pages(v_cache, block_table[b], L)
        g = H // k.shape[0]
        k, v = k.float().repeat_interleave(g, 0), v.float().repeat_interleave(g, 0)
        s = (q[b].float() @ k.transpose(-1, -2)) * sc  # (H, N, width)
        j = torch.arange(width)[None, :]
        i = torch.arange(N)[:, None]
        keep = j < L
        if is_causal:
            keep = keep & (j <= i + L - N)
        s = s.masked_fill(~keep, float("-inf"))  # NaN keys are past L: masked too
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - torch.where(torch.isneginf(lse), 0.0, lse)[..., None])
        o = p @ v  # 0 * NaN = NaN: the padding's V rows leak
        empty = torch.isneginf(lse)
        outs.append(torch.where(empty[..., None], torch.zeros_like(o), o))
        lses.append(lse)
    o = torch.stack(outs).to(q.dtype)
    return (o, torch.stack(lses)) if return_lse else o


target = ServingTarget("padding-leak-decode", decode=decode)
