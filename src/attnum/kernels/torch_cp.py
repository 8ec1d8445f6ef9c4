"""``torch-context-parallel``: torch.distributed.tensor.experimental.context_parallel around SDPA.

Every rank passes the *global* Q, K, V; inside the context manager torch shards them along the
sequence (round-robin load balancing for causal masks, on by default), runs ring attention with its
``_SDPAMerger`` (sigmoid form, ``convert_to_f32=True``) and SDPA's flash / efficient / cuDNN backends.
Those backends are CUDA-only, so it is reported unavailable without CUDA. Not run on this machine.
"""

from __future__ import annotations

import torch

NAME = "torch-context-parallel"
PACKAGE = "torch.distributed.tensor.experimental"
DEVICES = ("cuda",)
LAYOUT = "round-robin"


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
