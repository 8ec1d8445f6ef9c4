"""ring-flash-attn (zhuzilin/ring-flash-attention): its ring attention and its per-block merge.

- ``ring-flash-attn`` (context-parallel, :mod:`attnum.kernels.context_parallel`) --
  ``zigzag_ring_flash_attn_func``, one rank's call. Each rank passes its zigzag shard (chunks r and 2P-1-r) as
  (B, L, H, d); the package runs flash-attn per block (bf16 block outputs) and merges them in fp32 with the
  sigmoid form of the LSE merge (``utils._update_out_and_lse``), casting to the input dtype at the end. It needs
  flash_attn, hence CUDA, and an initialised process group (nccl). Not run on this machine: reported
  unavailable where the package or CUDA is missing.
- ``ring-flash-attn-merge`` -- ring-flash-attn 0.1.8's per-block merge, ``ring_flash_attn/utils.py``
  ``update_out_and_lse``, pure PyTorch, natural-log LSE. Each rank of ring attention calls it once per block it
  receives: the first call (``out=None``) takes the block as is (``out = block_out.float()``,
  ``lse = block_lse``), every later one merges in fp32 with the sigmoid form
  ``out -= sigmoid(block_lse - lse) (out - block_out)``, ``lse -= logsigmoid(lse - block_lse)``
  (ring-flash-attention#34); the caller casts ``out`` to the input dtype once at the end. Layout: block_out
  (B, L, H, dv), block_lse (B, H, L) float32; the running lse is (B, L, H, 1). The protocol's (T, H, dv) /
  (T, H) are B = 1, L = T. ``merge_state(a, b)``: the first call with a, then one update with b, cast to a's
  dtype; ``merge_states(n states)``: the first call, n - 1 updates in order (one rank's ring loop), one cast.
  From the installed ``ring_flash_attn`` or the pinned wheel (``attnum kernels fetch ring-flash-attn``): only
  ``utils.py`` is loaded (the package's ``__init__`` imports flash_attn). Runs on CPU as is.
"""

from __future__ import annotations

import torch

from attnum.kernels.protocol import CpKernel, serving_kernel
from attnum.kernels.serving import ServingTarget
from attnum.kernels.wheels import source as wheels

PACKAGE = "ring-flash-attn"  # the pinned wheel's name (attnum kernels fetch ring-flash-attn)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


# -- zigzag_ring_flash_attn_func (the installed package, CUDA) ---------------------------------------------

def rank_attention(q_r: torch.Tensor, k_r: torch.Tensor, v_r: torch.Tensor, *, causal: bool, scale: float,
                   group=None) -> torch.Tensor:
    """This rank's output (B, H, L, dv) for its zigzag shard (B, H, L, d)."""
    from ring_flash_attn import zigzag_ring_flash_attn_func

    out = zigzag_ring_flash_attn_func(q_r.transpose(1, 2), k_r.transpose(1, 2), v_r.transpose(1, 2),
                                      softmax_scale=scale, causal=causal, group=group)
    return out.transpose(1, 2)


# -- ring_flash_attn/utils.py update_out_and_lse (PyTorch, from the wheel) ------------------------------

def _update():
    return wheels.load(PACKAGE, "ring_flash_attn.utils").update_out_and_lse


def merge_states(o_n, lse_n):
    """o_n (n, T, H, dv), lse_n (n, T, H) -> (o (T, H, dv) in o_n's dtype, lse (T, H) float32)."""
    update = _update()
    out = lse = None
    for o, s in zip(o_n, lse_n, strict=True):  # block_out (1, T, H, dv), block_lse (1, H, T)
        out, lse = update(out, lse, o.unsqueeze(0), s.float().T.unsqueeze(0).contiguous())
    return out[0].to(o_n.dtype), lse[0, :, :, 0]


def merge_state(o_a, lse_a, o_b, lse_b):
    return merge_states(torch.stack([o_a, o_b]), torch.stack([lse_a.float(), lse_b.float()]))


MERGE = ServingTarget("ring-flash-attn-merge", merge_state=merge_state, merge_states=merge_states, lse_base="e")


KERNELS = (
    serving_kernel(MERGE, "ring-flash-attn 0.1.8 update_out_and_lse (PyTorch sigmoid merge, natural log)",
                   package=PACKAGE, dtypes=DTYPES, triton=False),
)
CP_KERNELS = (
    CpKernel(name="ring-flash-attn", package="ring_flash_attn", devices=("cuda",), layout="zigzag",
             rank_attention=rank_attention),
)
