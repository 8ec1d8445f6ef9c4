"""The golden value: attention in float64, exact semantics, one query chunk at a time.

Shape alphabet: B batch, H heads, G kv heads, N queries, S keys, d head dim, dv value dim.
"""

from __future__ import annotations

import torch

from attnum.attention import masks, steps
from attnum.attention.steps import prescale, query_chunk
from attnum.errors import bad_value
from attnum.numerics.policy import uniform
from attnum.numerics.workspace import Workspace

_FP64 = uniform("fp64")


@steps.no_autocast
def golden_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    return_lse: bool = False,
):
    """softmax(scale * Q K^T + mask) V in float64 -> (B, H, N, dv) float64 (and lse (B, H, N)).

    Three score transforms of serving kernels, each exact in float64:
    - ``softcap=cap`` (Gemma-2 logit soft-capping, flash-attn's ``softcap``): the scaled scores become
      ``cap * tanh(s / cap)`` before any mask is applied; None or 0 = off.
    - ``window=(left, right)`` (flash-attn's ``window_size``): see :mod:`attnum.attention.masks`.
    - ``sinks`` (H,) (gpt-oss's attention sinks): one logit per query head that joins each row's
      softmax denominator only, as a key with score ``sinks[h]`` and a zero value row would:
      ``O_i = sum_j exp(s_ij) V_j / (exp(sink_h) + sum_j exp(s_ij))``. A row with every key masked
      gives 0 (all weight on the sink); ``lse`` includes the sink (it is the row's denominator).

    Inputs of any float dtype are converted exactly to float64. Queries are processed in chunks and
    masks are cut per chunk, so N = S = 32768, d = 128, one head stays well under 2 GB, causal or
    not. Fully masked rows give 0. Differentiable: float64 autograd runs straight through it (empty
    rows get finite, zero gradients).
    This is float64 arithmetic, not infinitely precise: its own error is ~S * 2**-53 relative,
    far below every format attnum emulates except fp64 itself.
    """
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    q, k, v = q.double(), masks.expand_kv(k.double(), H), masks.expand_kv(v.double(), H)
    scale = masks.resolve_scale(scale, d)
    cap = _check_softcap(softcap)
    sink = _check_sinks(sinks, H, q.device)
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S), causal_alignment=causal_alignment, window=window)
    out = torch.empty(B, H, N, dv, dtype=torch.float64, device=q.device)
    lse = torch.empty(B, H, N, dtype=torch.float64, device=q.device) if return_lse else None
    q, post_scale = prescale(q, scale, _FP64)
    kT = k.transpose(-1, -2)
    step = query_chunk(B, H, S)
    # Without autograd the chunk's scores and probabilities live in two reused buffers: fresh
    # 100 MB tensors are page-faulted from the OS on every chunk, which costs more than the GEMMs.
    reuse = not (torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)))
    ws = Workspace()
    for i0 in range(0, N, step):
        i1 = min(N, i0 + step)
        shape = (B, H, i1 - i0, S)
        s = torch.matmul(q[:, :, i0:i1], kT, out=ws.get("s", shape, q.dtype, q.device)) if reuse else q[:, :, i0:i1] @ kT
        if post_scale != 1.0:
            s = s.mul_(post_scale)
        if cap is not None:  # on the scaled scores, before masks (flash-attn, Gemma-2)
            s = torch.tanh(s / cap) * cap
        tile = mk.tile(i0, i1, 0, S, torch.float64, q.device)
        if tile.additive is not None:
            s = s.add_(tile.additive)
        s = masks.apply_keep_(s, tile.keep)
        if sink is not None:
            # The sink as one more key of score sink[h] and value 0: appended, softmaxed, dropped.
            col = sink.view(1, H, 1, 1).expand(B, H, i1 - i0, 1)
            full = torch.cat([s, col], dim=-1)
            if lse is not None:
                lse[:, :, i0:i1] = torch.logsumexp(full, dim=-1)
            out[:, :, i0:i1] = torch.softmax(full, dim=-1)[..., :S] @ v
            continue
        if lse is not None:
            lse[:, :, i0:i1] = torch.logsumexp(s, dim=-1)
        # Rows whose every score is -inf (fully masked) have no softmax: they give 0.
        masked = tile.additive is not None or tile.keep is not None
        empty = (s == float("-inf")).all(dim=-1, keepdim=True) if masked else None
        if empty is not None and bool(empty.any()):
            s = s.masked_fill_(empty, 0.0)  # finite placeholder: keeps autograd free of 0 * NaN
        else:
            empty = None
        # fused max / exp-sum / divide in float64
        p = torch.softmax(s, dim=-1, out=ws.get("p", shape, q.dtype, q.device)) if reuse else torch.softmax(s, dim=-1)
        o = p @ v
        if empty is not None:
            o = o.masked_fill_(empty, 0.0)
        out[:, :, i0:i1] = o
    return (out, lse) if return_lse else out


def _check_softcap(softcap) -> float | None:
    """The cap as a float, None when off (None or 0); a negative or non-finite cap is refused."""
    if softcap is None or softcap == 0:
        return None
    cap = float(softcap)
    if not (cap > 0 and cap != float("inf")):
        raise bad_value("softcap", softcap, "a positive finite float, or 0 / None for no capping")
    return cap


def _check_sinks(sinks, H: int, device) -> torch.Tensor | None:
    """(H,) float64 sink logits on ``device``, or None."""
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor) or tuple(sinks.shape) != (H,) or not bool(torch.isfinite(sinks).all()):
        shape = tuple(sinks.shape) if isinstance(sinks, torch.Tensor) else type(sinks).__name__
        raise bad_value("sinks", shape, f"a finite tensor of shape ({H},), one logit per query head")
    return sinks.to(device, torch.float64)
