"""``tutorial_sdpa.sdpa`` with spare storage after every tensor: q, k, v are copied into buffers with
``SPARE`` elements after the data, and the kernel's output is allocated the same way. A kernel without
bounds masks then reads and writes inside memory that belongs to the process (the spare, zeros) instead
of past the tensor's end: no crash, but at a ragged N the last block reads the next head's rows, or
the zeros after the last head, as keys, and the output is wrong where the plain wrapper crashed.

    attnum audit triton-interpret:examples/triton_tutorial/tutorial_slack.py:sdpa --dtype fp16
"""

from __future__ import annotations

import contextlib

import fused_attention
import torch
import tutorial_sdpa

SPARE = 65536  # elements after each tensor


def _with_spare(x: torch.Tensor) -> torch.Tensor:
    buf = torch.zeros(x.numel() + SPARE, dtype=x.dtype, device=x.device)
    buf[: x.numel()].copy_(x.reshape(-1))
    return buf[: x.numel()].view(x.shape)


@contextlib.contextmanager
def _spare_outputs():
    """``torch.empty`` / ``torch.empty_like`` give tensors with spare storage after them while the kernel
    module allocates its output (and, in the upstream tutorial, its LSE)."""
    real_empty, real_like = torch.empty, torch.empty_like

    def empty(*args, **kwargs):
        return _with_spare(real_empty(*args, **kwargs))

    def empty_like(x, *args, **kwargs):
        return _with_spare(real_like(x, *args, **kwargs))

    fused_attention.torch.empty, fused_attention.torch.empty_like = empty, empty_like
    try:
        yield
    finally:
        fused_attention.torch.empty, fused_attention.torch.empty_like = real_empty, real_like


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if torch.is_grad_enabled() and query.requires_grad:
        return tutorial_sdpa.sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    q, k, v = (_with_spare(x.contiguous()) for x in (query, key, value))
    with _spare_outputs():
        return tutorial_sdpa.sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa).clone()
