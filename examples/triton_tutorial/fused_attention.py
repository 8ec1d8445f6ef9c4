"""A small Triton flash-attention forward in the style of Triton's fused-attention tutorial.

Written for attnum's docs (docs/audit.md, "The Triton fused-attention tutorial"): the forward loop of
``python/tutorials/06-fused-attention.py`` (triton-lang/triton; its non-TMA ``_attn_fwd`` /
``_attn_fwd_inner``) cut down to one function, with the tutorial's arithmetic and its assumptions:

- exp2 with ``qk_scale = sm_scale * log2(e)``, running max m_i, running sum l_i (starting at 1, as
  the tutorial's) and accumulator in fp32, one division at the end;
- causal masking with a finite ``-1.0e6`` added to the scores (the tutorial's ``tl.where(mask, 0, -1.0e6)``);
- P cast to fp16 before ``tl.dot(p, v, acc)`` (``P_AS_Q=True``: to the dtype of Q instead, the bf16
  edit the docs describe; ``fused_attention_bf16.py``);
- **no bounds masks on loads and stores**: N must be a multiple of the blocks (64 queries, 32 keys).
  At a ragged N the kernel reads past the head's rows (the next head's keys, or past the tensor's end
  into whatever memory follows) and writes past the output. This is the bug the audit finds.

Forward only (the tutorial's backward is not reproduced here). Shapes: q, k, v (B, H, N, d), one
shape, d in {32, 64, 128, 256}; ``attention(q, k, v, causal, sm_scale)`` returns (B, H, N, d).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N = 64, 32


@triton.jit
def _attn_fwd(Q, K, V, Out, sm_scale, N_CTX, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
              P_AS_Q: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * N_CTX * HEAD_DIM  # (batch x head)'s rows
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])  # unchecked, as in the tutorial
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1/log(2)
    hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + base + cols[None, :] * HEAD_DIM + offs_d[:, None])  # (d, BLOCK_N), unchecked
        qk = tl.dot(q, k)
        if CAUSAL:
            mask = offs_m[:, None] >= cols[None, :]
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = tl.load(V + base + cols[:, None] * HEAD_DIM + offs_d[None, :])  # unchecked
        if P_AS_Q:
            p = p.to(q.dtype)
        else:
            p = p.to(tl.float16)
        acc = tl.dot(p, v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(Out.type.element_ty))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
              p_as_q: bool = False) -> torch.Tensor:
    """The tutorial's ``attention.apply(q, k, v, causal, sm_scale)``, forward only."""
    B, H, N, d = q.shape
    o = torch.empty_like(q)
    grid = (triton.cdiv(N, BLOCK_M), B * H)
    _attn_fwd[grid](q, k, v, o, sm_scale, N, HEAD_DIM=d, CAUSAL=causal, P_AS_Q=p_as_q,
                    BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return o
