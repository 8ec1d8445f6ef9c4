"""``flashinfer-merge``: FlashInfer's ``merge_state`` / ``merge_states`` (``flashinfer.cascade``) as a merge target.

Layout is already the protocol's (:mod:`attnum.kernels.serving`): v (seq, heads, dim) in fp16/bf16,
s (seq, heads) float32, LSE in base 2. Empty states are (0, -inf) after flashinfer#4401; the Triton
merges still give NaN for two empty states (flashinfer#4051). Not an attention kernel: SDPA calls are
unsupported.
"""

from __future__ import annotations

import torch

from attnum.kernels.serving import ServingTarget

NAME = "flashinfer-merge"
PACKAGE = "flashinfer"
DEVICES = ("cuda",)
DTYPES = (torch.bfloat16, torch.float16)


def merge_state(o_a, lse_a, o_b, lse_b):
    import flashinfer

    if o_a.dtype not in DTYPES:
        raise NotImplementedError(f"flashinfer merge_state takes fp16/bf16 values, not {o_a.dtype}")
    return flashinfer.merge_state(o_a.contiguous(), lse_a.float().contiguous(), o_b.contiguous(),
                                  lse_b.float().contiguous())


def merge_states(o_TnHd, lse_TnH):
    """n-way merge: v (seq, num_states, heads, dim), s (seq, num_states, heads)."""
    import flashinfer

    return flashinfer.merge_states(o_TnHd.contiguous(), lse_TnH.float().contiguous())


sdpa = ServingTarget(NAME, merge_state=merge_state, lse_base=2)
sdpa.merge_states = merge_states
