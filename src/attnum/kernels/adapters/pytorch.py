"""PyTorch's own attention kernels beyond SDPA (the SDPA backends are the registry's ``torch-sdpa*``).

- ``torch-flex`` -- ``torch.nn.attention.flex_attention`` behind the SDPA signature. Masks become a
  ``score_mod`` that adds the SDPA bias (0 / -inf for bool masks, the float mask as given), so flex sees
  exactly the semantics SDPA would. Causal is top-left, as SDPA's. Runs eagerly (flex's unfused reference
  path on CPU); on CUDA it is what the user's compiled flex would compute up to kernel choice.
- ``torch-context-parallel`` (context-parallel, :mod:`attnum.kernels.context_parallel`) --
  ``torch.distributed.tensor.experimental.context_parallel`` around SDPA. Every rank passes the *global*
  Q, K, V; inside the context manager torch shards them along the sequence (round-robin load balancing for
  causal masks, on by default), runs ring attention with its ``_SDPAMerger`` (sigmoid form,
  ``convert_to_f32=True``) and SDPA's flash / efficient / cuDNN backends. Those backends are CUDA-only, so it
  is reported unavailable without CUDA. Not run on this machine.
"""

from __future__ import annotations

import math
import warnings

import torch

from attnum.attention import masks
from attnum.kernels.protocol import EVERY_DTYPE, CpKernel, sdpa_kernel

# -- torch.nn.attention.flex_attention ---------------------------------------------------------------------

def _bias(attn_mask, is_causal: bool, n: int, s: int, device) -> torch.Tensor | None:
    """(B?, H?, N, S) float32 additive bias, or None when nothing is masked; SDPA's semantics, from
    :mod:`attnum.attention.masks` (the one place they live)."""
    if attn_mask is None and not is_causal:
        return None
    shape = (1, 1) if attn_mask is None or attn_mask.dim() < 4 else tuple(attn_mask.shape[:2])
    mk = masks.masking(attn_mask, is_causal, (*shape, n, s))
    tile = mk.tile(0, n, 0, s, torch.float32, device)
    bias = torch.zeros(n, s, dtype=torch.float32, device=device)
    if tile.additive is not None:
        bias = bias + tile.additive
    if tile.keep is not None:
        bias = bias.masked_fill(~tile.keep, -math.inf)
    return bias if bias.dim() == 4 else bias.view(*(1,) * (4 - bias.dim()), *bias.shape)


def flex_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from torch.nn.attention.flex_attention import flex_attention

    if dropout_p:
        raise NotImplementedError("torch-flex adapter: dropout is not supported")
    if key.shape[-2] == 0:
        raise NotImplementedError("flex_attention needs at least one key")
    bias = _bias(attn_mask, is_causal, query.shape[-2], key.shape[-2], query.device)
    score_mod = None
    if bias is not None:
        bb, bh = bias.shape[0], bias.shape[1]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + bias[b if bb > 1 else 0, h if bh > 1 else 0, q_idx, kv_idx].to(score.dtype)

    with warnings.catch_warnings():  # eager flex warns on every call that it is not compiled
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(query, key, value, score_mod=score_mod, scale=scale, enable_gqa=enable_gqa)


# -- torch.distributed.tensor.experimental.context_parallel -------------------------------------------

def rank_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float,
                   group=None) -> torch.Tensor:
    """This rank's shard of the output, as context_parallel leaves it in the (sharded) buffers."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("cuda", (dist.get_world_size(group),))
    q, k, v = q.clone(), k.clone(), v.clone()  # context_parallel shards its buffers in place
    with context_parallel(mesh, buffers=(q, k, v), buffer_seq_dims=(2, 2, 2)):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


KERNELS = (
    sdpa_kernel("torch-flex", flex_sdpa, package="torch.nn.attention.flex_attention", devices=("cpu", "cuda"),
                dtypes=EVERY_DTYPE, doc="``torch-flex``: torch.nn.attention.flex_attention behind the SDPA signature."),
)
CP_KERNELS = (
    CpKernel(name="torch-context-parallel", package="torch.distributed.tensor.experimental", devices=("cuda",),
             layout="round-robin", rank_attention=rank_attention),
)
