"""``ring-flash-attn-merge``: ring-flash-attn 0.1.8's per-block merge, ``ring_flash_attn/utils.py``
``update_out_and_lse`` (zhuzilin/ring-flash-attention), pure PyTorch, natural-log LSE.

Each rank of ring attention calls it once per block it receives: the first call (``out=None``) takes
the block as is (``out = block_out.float()``, ``lse = block_lse``), every later one merges in fp32
with the sigmoid form ``out -= sigmoid(block_lse - lse) (out - block_out)``,
``lse -= logsigmoid(lse - block_lse)`` (ring-flash-attention#34); the caller casts ``out`` to the
input dtype once at the end. Layout: block_out (B, L, H, dv), block_lse (B, H, L) float32; the
running lse is (B, L, H, 1). The protocol's (T, H, dv) / (T, H) are B = 1, L = T.

- ``merge_state(a, b)``: the first call with a, then one update with b, cast to a's dtype;
- ``merge_states(n states)``: the first call, n - 1 updates in order (one rank's ring loop), one cast.

From the installed ``ring_flash_attn`` or the pinned wheel (``attnum kernels fetch ring-flash-attn``):
only ``utils.py`` is loaded (the package's ``__init__`` imports flash_attn). Runs on CPU as is.
"""

from __future__ import annotations

import torch

from attnum.kernels import wheels
from attnum.kernels.serving import ServingTarget

PACKAGE = "ring-flash-attn"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


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
