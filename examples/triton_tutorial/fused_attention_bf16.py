"""``fused_attention.py`` with the one edit docs/audit.md describes for bf16: P is cast to the dtype of
Q (``p.to(q.dtype)``) instead of fp16 before the P·V dot, so bf16 inputs stay bf16 end to end."""

from __future__ import annotations

import fused_attention  # beside this file (attnum puts the target's folder on sys.path)


def attention(q, k, v, causal, sm_scale):
    return fused_attention.attention(q, k, v, causal, sm_scale, p_as_q=True)
