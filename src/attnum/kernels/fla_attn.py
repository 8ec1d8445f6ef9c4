"""``fla-parallel-attn`` and ``fla-decode``: flash-linear-attention's softmax attention (fla-core 0.6.0;
fla-org/flash-linear-attention), forward: ``fla/ops/attn/parallel.py`` ``parallel_attn`` and
``fla/ops/attn/decoding.py`` ``attn_decoding_one_step``.

Causal softmax attention over (B, T, HQ, K) queries and (B, T, H, K) keys/values (GQA when HQ % H == 0),
online softmax in base 2 (scores times log2(e); its internal LSE is base 2 and not returned),
``window_size=W``: query i sees keys i - W < j <= i, ``sink_bias`` (HQ,): a gpt-oss sink in natural
units (fla multiplies it by log2(e)). As SDPA: q (B, H, N, d) are transposed to fla's layout; the
adapter declares the window (flash-attn's ``window_size=(W - 1, 0)``) and sinks
(attnum.kernels.conventions).

What it refuses (NotImplementedError: "unsupported"): a non-causal call (fla has no non-causal path),
N != S (queries and keys share T), an ``attn_mask``, a window with a right reach other than 0 or an
unbounded left (-1 is the plain causal call), ``enable_gqa=False`` with H != G.

``fla-decode`` (the decode entry point of attnum.kernels.serving; no SDPA entry point):
``attn_decoding_one_step`` takes one query per sequence, q (1, B, HQ, K), and the sequences' keys packed
into k, v (1, T, H, K) by ``cu_seqlens`` (varlen). The adapter packs each sequence's first
``cache_seqlens[b]`` keys of the cache (or its pages, through the block table) in order; the kernel walks
tiles of BS keys (at most 64 on an sm90) in one pass with an online softmax, no split (``num_splits`` is
ignored), and returns no LSE (``return_lse`` is unsupported); its autotuner keeps its first config (a shim:
:func:`_one_config`). It multiplies q by the scale and rounds the
product to the input dtype before the scores (``b_q = (b_q * scale).to(b_q.dtype)``).

From the installed ``fla`` or the pinned wheel (``attnum kernels fetch fla``; stand-ins for its package
imports: attnum.kernels.wheels). On CPU through Triton's interpreter (attnum.kernels.triton_faithful).
"""

from __future__ import annotations

import torch

from attnum.kernels import serving_layout as lay
from attnum.kernels import wheels
from attnum.kernels.serving import ServingTarget

PACKAGE = "fla"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_PARALLEL = "fla.ops.attn.parallel"
_DECODING = "fla.ops.attn.decoding"


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


def varlen(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, is_causal=False,
           scale=None):
    """attnum's varlen protocol (q (Tq, H, d), k, v (Tk, G, d)) -> ``parallel_attn(..., cu_seqlens)`` on the
    packed tokens as one batch of 1. fla takes one ``cu_seqlens`` (queries and keys are the same tokens)
    and is causal only: other calls are unsupported."""
    if not is_causal:
        raise NotImplementedError("fla parallel_attn is causal only (is_causal=False not supported)")
    if not torch.equal(cu_seqlens_q.cpu(), cu_seqlens_k.cpu()):
        raise NotImplementedError("fla parallel_attn takes one cu_seqlens (query and key lengths equal)")
    o = wheels.load(PACKAGE, _PARALLEL).parallel_attn(
        q.unsqueeze(0).contiguous(), k.unsqueeze(0).contiguous(), v.unsqueeze(0).contiguous(), scale=scale,
        cu_seqlens=cu_seqlens_q.to(device=q.device, dtype=torch.long))
    return o[0]


TARGET = ServingTarget("fla-parallel-attn", sdpa=sdpa, varlen=varlen, causal_alignment="bottom_right",
                       features=("window", "sinks"))


def decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, num_splits=None, max_seqlen=None,
           is_causal=True, scale=None, return_lse=False):
    """attnum's decode protocol -> ``attn_decoding_one_step`` (N = 1; the query sees its whole cache)."""
    B, H, N, d = q.shape
    if N != 1:
        raise NotImplementedError("fla attn_decoding_one_step: one query per sequence")
    if return_lse:
        raise NotImplementedError("fla attn_decoding_one_step returns no LSE")
    lens = lay.lengths(cache_seqlens)
    k, v, indptr, indices = lay.token_pool(k_cache, v_cache, lens, block_table)  # (T, G, d), packed by indices
    idx = indices.long()
    cu = indptr.to(device=q.device, dtype=torch.long)
    mod = wheels.load(PACKAGE, _DECODING)
    _one_config(mod.naive_attn_decoding_kernel)
    o = mod.attn_decoding_one_step(
        q[:, :, 0].unsqueeze(0).contiguous(), k[idx].unsqueeze(0).contiguous(), v[idx].unsqueeze(0).contiguous(),
        scale=scale, cu_seqlens=cu)
    return o[0].unsqueeze(2)  # (1, B, H, dv) -> (B, H, 1, dv)


def _one_config(kernel, *, harmless: frozenset = frozenset(), keep: int = 0) -> None:
    """Shim: a kernel's ``triton.autotune`` times its configs on the GPU driver, which Triton's
    interpreter does not have ("0 active drivers"). Configs that differ only in ``num_warps`` and
    ``num_stages`` (and in the meta-parameters named ``harmless``, which the caller has checked change no
    arithmetic) compute the same in the interpreter, so the autotuner keeps config ``keep`` and never
    benchmarks; any other meta-parameter is refused."""
    tuner = kernel
    while tuner is not None and not hasattr(tuner, "configs"):
        tuner = getattr(tuner, "fn", None)
    if tuner is None or len(tuner.configs) <= 1:
        return
    if any(set(c.kwargs) - harmless for c in tuner.configs):
        raise NotImplementedError(f"fla's {getattr(kernel, '__name__', 'kernel')} autotunes a meta-parameter: the "
                                  "interpreter cannot pick")
    tuner.configs = [tuner.configs[keep]]


DECODE = ServingTarget("fla-decode", decode=decode, single_query_only=True, split_rule="fixed-size")
