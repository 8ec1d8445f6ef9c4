"""A sliding-window kernel as a user writes one (no attnum import), bottom-right causal like every serving
kernel. ``broken`` masks the scores outside the window but multiplies P by every V row of its key tiles, the
ones before the window included, as vLLM's Triton unified attention did until vLLM 0.14
(vllm-project/vllm PR #30887): a NaN in memory the window freed becomes 0 * NaN = NaN. ``fixed`` skips the
tiles wholly before the window and zeroes the V rows of the others that no query of the block may see."""

import math

import torch

TILE = 16


def _keep(n, s, left, right, is_causal):
    i = torch.arange(n)[:, None] + (s - n)  # bottom-right: the queries are the last n positions
    j = torch.arange(s)[None, :]
    keep = torch.ones(n, s, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if is_causal or right >= 0:
        keep &= j <= i + (0 if is_causal else right)
    return keep


def _attention(q, k, v, is_causal, scale, window_size, guard):
    B, H, n, d = q.shape
    s_len = k.shape[2]
    kf = k.float().repeat_interleave(H // k.shape[1], 1)
    vf = v.float().repeat_interleave(H // v.shape[1], 1)
    left, right = window_size if window_size is not None else (-1, -1)
    keep = _keep(n, s_len, left, right, is_causal)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    m = torch.full((B, H, n, 1), -math.inf)
    acc, l_sum = torch.zeros(B, H, n, v.shape[-1]), torch.zeros(B, H, n, 1)
    for t0 in range(0, s_len, TILE):  # online softmax over key tiles
        cols = slice(t0, min(t0 + TILE, s_len))
        seen = keep[:, cols]
        if guard and not bool(seen.any()):
            continue  # a tile wholly outside the window is never loaded
        vt = vf[:, :, cols]
        if guard:
            vt = torch.where(seen.any(0)[:, None], vt, 0.0)  # V rows no query sees: not loaded
        st = (q.float() @ kf[:, :, cols].transpose(-1, -2)) * scale
        st = st.masked_fill(~seen, -math.inf)
        m_new = torch.maximum(m, st.amax(-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), 0.0, m_new)
        p = torch.exp(st - safe)
        alpha = torch.exp(m - safe)
        acc = acc * alpha + p @ vt  # P = 0 outside the window: 0 * NaN = NaN when vt holds it
        l_sum = l_sum * alpha + p.sum(-1, keepdim=True)
        m = m_new
    return (acc / torch.where(l_sum == 0, 1.0, l_sum)).to(q.dtype)


def broken(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
           window_size=None):
    if attn_mask is not None:
        raise NotImplementedError("no attn_mask")
    return _attention(q, k, v, is_causal, scale, window_size, guard=False)


def fixed(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
          window_size=None):
    if attn_mask is not None:
        raise NotImplementedError("no attn_mask")
    return _attention(q, k, v, is_causal, scale, window_size, guard=True)


for _fn in (broken, fixed):
    _fn.attnum_window = True
    _fn.attnum_causal_alignment = "bottom_right"
