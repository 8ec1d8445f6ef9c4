"""``sage1-triton``: SageAttention 1.0.6's Triton path (thu-ml/SageAttention, ``sageattention`` on PyPI).

What ``sageattention.core.sageattn(q, k, v, tensor_layout="HND", is_causal, sm_scale, smooth_k=True)``
runs, as SDPA:

- host side (``core.py``): K smoothed in the input dtype (``km = k.mean(dim=seq); k -= km`` -- in place,
  on the caller's tensor), V converted to fp16 for bf16 / fp32 inputs, head dims 64, 96 and 128 only
  (96 takes the ``_hd96`` / ``_h96`` kernels);
- ``quant_per_block.per_block_int8``: Q times ``sm_scale * 1.44269504`` (log2 units), INT8 per block of
  128 Q rows / 64 K rows, scale ``max|x| / 127``, ``x / scale`` rounded half away from zero by
  ``x += 0.5 * sign(x); x.to(int8)``;
- ``attn_qk_int8_per_block[_causal].forward``: ``qk = tl.dot(q_int8, k_int8).to(fp32) * q_scale *
  k_scale`` (an int32 accumulator), online softmax with ``exp2``, ``acc += tl.dot(p.to(fp16), v,
  out_dtype=fp16)`` (an fp16 MMA accumulator per 64-key tile, added into fp32), ``O = acc / l`` stored in
  the input dtype. It returns no LSE.

Conventions read from the source and declared here: causal only for N == S (it asserts), so its
alignment is moot (top-left); no ``attn_mask``; the causal diagonal tile adds ``-1.0e6`` to masked scores
(log2 units), the non-causal kernel masks nothing (keys past S are loaded as 0, so they score 0);
``l`` starts at 1.0 and ``m`` at -inf, so S = 0 gives ``acc / 1 = 0``: empty rows are zeros.
Its designed arithmetic is attnum's ``sage1`` emulation (``emulation = "sage1"``): the auditor judges its
output against that emulation, not against a 16-bit kernel's bounds (docs/lowbit.md).

On CPU the adapter runs ``core.sageattn``'s host code itself (``sageattn`` asserts CUDA tensors since 1.0.5)
out of place, and the kernels through Triton's interpreter; with CUDA, and for 1.0.3 / 1.0.4 (whose host code
has no CUDA assert, per-head-dim kernel files in 1.0.3, ``tensor_layout`` from 1.0.4; fp16 only here), it calls
``sageattn`` on a copy of K. From the installed ``sageattention`` or a pinned wheel (``attnum kernels fetch
sageattention[@VERSION]``, default 1.0.6; ``sage1-triton@1.0.3`` runs 1.0.3).
"""

from __future__ import annotations

import torch

from attnum.kernels.protocol import serving_kernel
from attnum.kernels.serving import ServingTarget
from attnum.kernels.wheels import signature as sig
from attnum.kernels.wheels import source as wheels

PACKAGE = "sageattention"
DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # sageattn's assert
HEAD_DIMS = (64, 96, 128)  # sageattn's assert
EMULATION = "sage1"
MASK_SENTINEL = -1.0e6  # attn_qk_int8_per_block_causal.py, the diagonal tile (log2 units)


def _mod(name: str):
    return wheels.load(PACKAGE, f"{PACKAGE}.{name}")


def _refuse(query, key, value, attn_mask, is_causal, enable_gqa) -> None:
    if attn_mask is not None:
        raise NotImplementedError("sageattn: no attn_mask (causal or nothing)")
    if query.dtype not in DTYPES:
        raise NotImplementedError(f"sageattn: fp16, bf16 or fp32 inputs, not {query.dtype}")
    d = query.shape[-1]
    if d not in HEAD_DIMS or key.shape[-1] != d or value.shape[-1] != d:
        raise NotImplementedError(f"sageattn: head dim 64, 96 or 128 for q, k and v (got {d}, {key.shape[-1]}, "
                                  f"{value.shape[-1]})")
    H, G = query.shape[1], key.shape[1]
    if G != H and not enable_gqa:
        raise NotImplementedError("sageattn: G != H needs enable_gqa")
    if H % G:
        raise NotImplementedError(f"sageattn: H={H} must be a multiple of G={G}")
    if is_causal and query.shape[-2] != key.shape[-2]:
        raise NotImplementedError("sageattn: causal only with qo_len == kv_len (it asserts)")


def _host(query, key, value, is_causal, scale):
    """core.sageattn's host code for tensor_layout="HND", smooth_k=True, without its CUDA assert and
    without modifying the caller's K."""
    dtype = query.dtype
    k = key - key.mean(dim=2, keepdim=True)  # sageattn: km = k.mean(dim=seq_dim, keepdim=True); k -= km
    v = value.to(torch.float16) if dtype in (torch.bfloat16, torch.float32) else value
    q, k, v = query.contiguous(), k.contiguous(), v.contiguous()
    causal = "_causal" if is_causal else ""
    if query.shape[-1] == 96:
        q8, qs, k8, ks = _mod("quant_per_block_hd96").per_block_int8_hd96(q, k, sm_scale=scale)
        fwd = _mod(f"attn_qk_int8_per_block_h96{causal}").forward
    else:
        q8, qs, k8, ks = _mod("quant_per_block").per_block_int8(q, k, sm_scale=scale)
        fwd = _mod(f"attn_qk_int8_per_block{causal}").forward
    return fwd(q8, k8, v, qs, ks, tensor_layout="HND", output_dtype=dtype)


CORE_CALL = sig.Call(leaf="core", function="sageattn", positional=("q", "k", "v"), keywords=("is_causal",),
                     optional=("tensor_layout", "scale", "sm_scale", "smooth_k"))
"""``sageattn(q, k, v, ...)`` in every version; 1.0.4 inserted ``tensor_layout`` (passed by name here), 1.0.5
renamed ``scale`` to ``sm_scale``."""


def _check(version: str) -> str:
    return sig.problem(PACKAGE, version, CORE_CALL)


def _core(query, key, value, is_causal, scale):
    """``core.sageattn`` itself, on a copy of K (sageattn up to 1.0.3 and from 1.0.5 smooths K in place): the
    path of versions whose host code runs on CPU (1.0.3, 1.0.4: no CUDA assert). Its asserts (1.0.3: a
    sequence of at least 128) are its refusals."""
    fn = _mod("core").sageattn
    kw = {"tensor_layout": "HND"} if sig.takes(fn, "tensor_layout") else {}
    if scale is not None:
        name = "sm_scale" if sig.takes(fn, "sm_scale") else "scale"
        kw[name] = scale  # passed as asked: a version that ignores it answers for it
    try:
        return fn(query, key.clone(), value, is_causal=bool(is_causal), **kw)
    except AssertionError as exc:
        raise NotImplementedError(f"sageattn refuses this call: {exc}") from exc


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA -> sageattn (HND layout, smooth_k=True); refuses what sageattn cannot take."""
    _refuse(query, key, value, attn_mask, is_causal, enable_gqa)
    sm_scale = None if scale is None else float(scale)
    if query.device.type == "cuda":
        return _core(query, key, value, is_causal, sm_scale)
    if not sig.takes(_mod("quant_per_block").per_block_int8, "sm_scale"):
        # 1.0.3 / 1.0.4: sageattn's host code has no CUDA assert and runs as is. Their fp16 path is sage1's
        # design; 1.0.3's bf16 kernels (bf16 P V) are not, so only fp16 is judged here.
        if query.dtype != torch.float16:
            raise NotImplementedError("sageattn before 1.0.5 on CPU: fp16 only here (1.0.3's bf16 kernels are "
                                      "not the sage1 design attnum judges against)")
        return _core(query, key, value, is_causal, sm_scale)
    return _host(query, key, value, bool(is_causal), sm_scale)


TARGET = ServingTarget("sage1-triton", sdpa=sdpa, causal_alignment="top_left", empty_rows="zeros",
                       emulation=EMULATION)


KERNELS = (
    serving_kernel(TARGET, "SageAttention 1.0.6 sageattn (Triton; INT8 Q K, fp16 P V; as SDPA)", package=PACKAGE,
                   dtypes=DTYPES, check=_check),
)
