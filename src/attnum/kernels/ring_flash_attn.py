"""``ring-flash-attn``: zhuzilin/ring-flash-attention's ``zigzag_ring_flash_attn_func``, one rank's call.

Each rank passes its zigzag shard (chunks r and 2P-1-r) as (B, L, H, d); the package runs
flash-attn per block (bf16 block outputs) and merges them in fp32 with the sigmoid form of the LSE
merge (``utils._update_out_and_lse``), casting to the input dtype at the end. It needs flash_attn,
hence CUDA, and an initialised process group (nccl). Not run on this machine: reported unavailable
where the package or CUDA is missing.
"""

from __future__ import annotations

import torch

NAME = "ring-flash-attn"
PACKAGE = "ring_flash_attn"
DEVICES = ("cuda",)
LAYOUT = "zigzag"


def rank_attention(q_r: torch.Tensor, k_r: torch.Tensor, v_r: torch.Tensor, *, causal: bool, scale: float,
                   group=None) -> torch.Tensor:
    """This rank's output (B, H, L, dv) for its zigzag shard (B, H, L, d)."""
    from ring_flash_attn import zigzag_ring_flash_attn_func

    out = zigzag_ring_flash_attn_func(q_r.transpose(1, 2), k_r.transpose(1, 2), v_r.transpose(1, 2),
                                      softmax_scale=scale, causal=causal, group=group)
    return out.transpose(1, 2)
