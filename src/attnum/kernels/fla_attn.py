"""``fla-parallel-attn``: flash-linear-attention's softmax attention, ``fla/ops/attn/parallel.py``
``parallel_attn`` (fla-core 0.6.0; fla-org/flash-linear-attention), forward.

Causal softmax attention over (B, T, HQ, K) queries and (B, T, H, K) keys/values (GQA when HQ % H == 0),
online softmax in base 2 (scores times log2(e); its internal LSE is base 2 and not returned),
``window_size=W``: query i sees keys i - W < j <= i, ``sink_bias`` (HQ,): a gpt-oss sink in natural
units (fla multiplies it by log2(e)). As SDPA: q (B, H, N, d) are transposed to fla's layout; the
adapter declares the window (flash-attn's ``window_size=(W - 1, 0)``) and sinks
(attnum.kernels.conventions).

What it refuses (NotImplementedError: "unsupported"): a non-causal call (fla has no non-causal path),
N != S (queries and keys share T), an ``attn_mask``, a window with a right reach other than 0 or an
unbounded left (-1 is the plain causal call), ``enable_gqa=False`` with H != G.

From the installed ``fla`` or the pinned wheel (``attnum kernels fetch fla``; stand-ins for its package
imports: attnum.kernels.wheels). On CPU through Triton's interpreter (attnum.kernels.triton_faithful).
"""

from __future__ import annotations

import torch

from attnum.kernels import wheels
from attnum.kernels.serving import ServingTarget

PACKAGE = "fla"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_PARALLEL = "fla.ops.attn.parallel"


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
         window_size=None, sinks=None, cu_seqlens=None):
    """q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv) -> (B, H, N, dv) through ``parallel_attn``."""
    if attn_mask is not None:
        raise NotImplementedError("fla parallel_attn takes no attn_mask")
    if not is_causal:
        raise NotImplementedError("fla parallel_attn is causal only (is_causal=False not supported)")
    if query.shape[-2] != key.shape[-2]:
        raise NotImplementedError(f"fla parallel_attn needs N == S (one T); got N={query.shape[-2]}, "
                                  f"S={key.shape[-2]}: not supported")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise NotImplementedError("H != G without enable_gqa: not supported")
    w = None
    if window_size is not None:
        left, right = (int(x) for x in window_size)
        if right not in (0, -1) or left < -1:
            raise NotImplementedError(f"fla parallel_attn's window is causal (right = 0); window_size="
                                      f"{tuple(window_size)} not supported")
        w = None if left == -1 else left + 1
    bias = None if sinks is None else sinks.to(device=query.device, dtype=torch.float32).contiguous()
    o = wheels.load(PACKAGE, _PARALLEL).parallel_attn(
        query.transpose(1, 2).contiguous(), key.transpose(1, 2).contiguous(), value.transpose(1, 2).contiguous(),
        scale=scale, window_size=w, cu_seqlens=cu_seqlens, sink_bias=bias)
    return o.transpose(1, 2)


TARGET = ServingTarget("fla-parallel-attn", sdpa=sdpa, causal_alignment="bottom_right",
                       features=("window", "sinks"))
