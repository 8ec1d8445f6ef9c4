"""``vllm-merge``: vLLM's ``merge_attn_states`` (prefix/suffix merge of chunked prefill) as a merge target.

vLLM writes into a preallocated output and keeps the LSE head-major: outputs (tokens, heads, dim), LSE
(heads, tokens) float32, natural log; the adapter transposes to the protocol's (tokens, heads). The CUDA
kernel maps +-inf LSEs to -inf (it accepts FA2's +inf empty rows); the Triton one gave NaN for two empty
states before vllm#39148. Not an attention kernel: SDPA calls are unsupported.
"""

from __future__ import annotations

import importlib

import torch

from attnum.kernels.serving import ServingTarget

NAME = "vllm-merge"
PACKAGE = "vllm"
DEVICES = ("cuda",)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_MODULES = ("vllm.v1.attention.ops.merge_attn_states", "vllm.attention.ops.merge_attn_states")


def _kernel():
    for name in _MODULES:  # the module moved between vLLM versions
        try:
            return importlib.import_module(name).merge_attn_states
        except ImportError:
            continue
    raise NotImplementedError(f"vllm is installed but none of {_MODULES} provides merge_attn_states")


def merge_state(o_a, lse_a, o_b, lse_b):
    fn = _kernel()
    out = torch.empty_like(o_a)
    out_lse = torch.empty_like(lse_a.float().T.contiguous())
    fn(out, o_a.contiguous(), lse_a.float().T.contiguous(), o_b.contiguous(), lse_b.float().T.contiguous(),
       out_lse)
    return out, out_lse.T


sdpa = ServingTarget(NAME, merge_state=merge_state, lse_base="e")
