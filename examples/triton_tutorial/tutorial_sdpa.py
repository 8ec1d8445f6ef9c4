"""The SDPA-signature wrapper docs/audit.md audits: maps attnum's arguments onto the tutorial-style
kernel and *refuses* (NotImplementedError: the case is ``unsupported``, not failed) what the kernel
cannot express. fp16 goes to ``fused_attention`` (P cast to fp16, as the tutorial); bf16 to
``fused_attention_bf16`` (P cast to the input dtype).

    attnum audit triton-interpret:examples/triton_tutorial/tutorial_sdpa.py:sdpa --dtype fp16
"""

from __future__ import annotations

import math

import fused_attention
import fused_attention_bf16
import torch
import triton

# With the upstream tutorial in place of the small kernel (docs/audit.md): its autotuner benchmarks on a
# GPU driver, which the interpreter lacks, so pin one of its own configs.
for _mod in (fused_attention, fused_attention_bf16):
    if hasattr(getattr(_mod, "_attn_fwd", None), "configs"):
        _mod._attn_fwd.configs = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_stages=3, num_warps=4)]


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if attn_mask is not None:
        raise NotImplementedError("tutorial kernel: no attn_mask")
    if query.shape != key.shape or key.shape != value.shape:
        raise NotImplementedError("tutorial kernel: q, k, v of one shape (N == S, no GQA)")
    if query.shape[-1] not in (32, 64, 128, 256):
        raise NotImplementedError("tutorial kernel: head dim in {32, 64, 128, 256}")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise NotImplementedError("tutorial kernel: fp16 (as written) or bf16 (P cast to the input dtype)")
    mod = fused_attention if query.dtype == torch.float16 else fused_attention_bf16
    if torch.is_grad_enabled() and query.requires_grad:
        if not hasattr(mod, "_attn_bwd") or query.dtype != torch.float16:
            raise NotImplementedError("no backward here (the small kernel is forward only; upstream's is fp16 only)")
        if query.shape[-2] % 128:
            raise NotImplementedError("tutorial backward: N_CTX % 128 == 0 only (it asserts so)")
    sm_scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    return mod.attention(query.contiguous(), key.contiguous(), value.contiguous(), bool(is_causal), sm_scale)
