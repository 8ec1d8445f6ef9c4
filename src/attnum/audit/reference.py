"""The references every probe compares a target with: float64 golden and a same-precision baseline.

Shapes: q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv), H % G == 0; outputs (B, H, N, dv).

Golden is ``attnum.golden_attention``: float64 on the target's own (low-precision) inputs, with
torch >= 2.5 mask semantics from ``attnum.attention.masks`` (bool True = attend, float masks added,
top-left ``is_causal``, empty rows -> 0).

The same-precision baseline is FlashAttention's ``attention_ref(upcast=False)`` ("out_pt"), the
yardstick of both flash-attn's and PyTorch's test suites: plain attention whose *materialised*
tensors - scores S, probabilities P = softmax(S), output O - are each rounded to the input dtype,
while the matmuls and the softmax reduce in float32 as torch's eager ops do; with FA's
``reorder_ops=True`` the scale is applied to K (rounded in the input dtype) rather than to QK^T. As a core policy that is
``uniform:<dt>`` with ``exp`` and ``row_sum`` widened to fp32 (matmuls already accumulate in fp32):
see :func:`baseline_policy`. It is deliberately *not* torch's SDPA math backend: on CPU that backend
upcasts bf16/fp16 to float32 internally and rounds only the output (measured: its bf16 error equals
the fp32 result rounded once), so it is one of the candidates being judged, not the yardstick of
"what a straightforward kernel in this precision gets".

Gradients need references that autograd can go through safely, so the backward probes use
:func:`golden_grad_reference` (float64, empty rows neutralised *before* the softmax, so no 0 * NaN in
backward) and :func:`baseline_grad_reference` (the same attention in the input dtype, as FA's suite
differentiates ``attention_ref(upcast=False)``).
"""

from __future__ import annotations

import math

import torch

from attnum.attention import masks
from attnum.attention.baseline import baseline_attention
from attnum.attention.flash import flash_attention
from attnum.attention.flash_backward import flash_backward
from attnum.attention.golden import golden_attention
from attnum.policy import Policy, parse_policy

_FORMAT_OF = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}


def baseline_policy(dtype: torch.dtype) -> Policy:
    """FA's out_pt as a policy: S, P, O (and the PV product) in ``dtype``; softmax reductions in fp32."""
    fmt = _FORMAT_OF[dtype]
    if fmt in ("fp32", "fp64"):
        return parse_policy(f"uniform:{fmt}")
    return parse_policy(f"uniform:{fmt},exp=fp32,row_sum=fp32")


def golden(q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
    """Float64 golden output (B, H, N, dv)."""
    return golden_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)


def baseline(q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
    """Same-precision baseline output (B, H, N, dv), values on q.dtype's grid."""
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # FA's reorder_ops=True: K is scaled (and rounded) in the input dtype, so the baseline carries
    # the error of one reordering of the scaling, as kernels scale at different steps.
    return baseline_attention(q, (k * sc).to(k.dtype), v, attn_mask=attn_mask, is_causal=is_causal,
                              scale=1.0, policy=baseline_policy(q.dtype))


def empty_rows(attn_mask, is_causal: bool, n: int, s: int, shape: tuple[int, ...]) -> torch.Tensor:
    """Bool (B, H, N): rows with no attendable key (golden gives them 0, or NaN by declaration)."""
    b, h = shape[:2]
    if s == 0:
        return torch.ones(b, h, n, dtype=torch.bool)
    additive, hard = masks.build_masks(attn_mask, is_causal, (b, h, n, s), torch.float64, torch.device("cpu"))
    total = torch.zeros(b, h, n, s, dtype=torch.float64)
    for part in (additive, hard):
        if part is not None:
            total = total + part
    return torch.isneginf(total).all(dim=-1)


def _bias(attn_mask, is_causal, shape, dtype, device) -> torch.Tensor | None:
    additive, hard = masks.build_masks(attn_mask, is_causal, shape, dtype, device)
    parts = [p for p in (additive, hard) if p is not None]
    return sum(parts[1:], parts[0]) if parts else None


def _attention(q, k, v, attn_mask, is_causal, scale, softmax_dtype) -> torch.Tensor:
    b, h, _, n, s, d, dv = masks.check_qkv(q, k, v)
    k, v = masks.expand_kv(k, h), masks.expand_kv(v, h)
    if s == 0:
        return q.new_zeros(b, h, n, dv) + 0 * q.sum()  # keep q in the graph: its gradient is 0
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    scores = q @ (k * sc).transpose(-1, -2)  # FA's reorder_ops: the scale goes on K
    bias = _bias(attn_mask, is_causal, (b, h, n, s), softmax_dtype, q.device)
    s32 = scores.to(softmax_dtype) if bias is None else scores.to(softmax_dtype) + bias
    dead = torch.isneginf(s32).all(dim=-1, keepdim=True)
    p = torch.softmax(s32.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return p.to(q.dtype) @ v


def golden_grad_reference(q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
    """Float64 attention whose backward is finite on empty rows (for float64 autograd)."""
    return _attention(q.double(), k.double(), v.double(), attn_mask, is_causal, scale, torch.float64)


FA2_TILE = 64  # Br = Bc for the FA2 backward baseline (a common CPU/GPU tile)


def fa2_grads(q, k, v, dout, *, attn_mask=None, is_causal=False, scale=None) -> list[torch.Tensor]:
    """[dq, dk, dv] of FlashAttention-2's recompute-from-LSE backward in q.dtype (policy fa2:<dt>).

    FA2 is a standard same-precision algorithm whose gradients are inherently less accurate than
    differentiating materialised attention: D = rowsum(dO * O) uses the rounded output, and P is
    recomputed as exp(S - LSE) from an LSE held in fp32 and computed in fp32 as m + log(l), whose
    absolute error (~|LSE| * eps) becomes a relative error of every P. The core's forward keeps the
    LSE in float64, so it is recomputed here the way kernels do before calling the core backward.
    """
    policy = parse_policy(f"fa2:{_FORMAT_OF[q.dtype]}")
    c = policy.carrier
    b, h, _, n, s, d, _ = masks.check_qkv(q, k, v)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = flash_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=sc, policy=policy,
                          block_q=FA2_TILE, block_k=FA2_TILE)
    additive, hard = masks.build_masks(attn_mask, is_causal, (b, h, n, s), c, q.device)
    s_c = (q.to(c) @ masks.expand_kv(k.to(c), h).transpose(-1, -2)) * sc  # scores in the carrier
    for part in (additive, hard):
        if part is not None:
            s_c = s_c + part
    m = s_c.amax(dim=-1)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    lse = m + torch.log(torch.exp(s_c - m_safe[..., None]).sum(dim=-1))  # -inf for empty rows
    # FA's reorder_ops: the backward recomputes S from a pre-scaled Q, so its rounding of S is not
    # the forward's. Real kernels recompute S in a different kernel (other blocking, other order);
    # errors in S and in the LSE then no longer cancel in P = exp(S - LSE), which dominates the
    # gradient error at large logits. dL/dq = sc * dL/d(q * sc).
    mk = masks.masking(attn_mask, is_causal, (b, h, n, s))
    dq, dk, dv_ = flash_backward(q.to(c) * sc, k, v, out, lse, dout.to(c), mk=mk,
                                 scale=1.0, policy=policy, Bc=FA2_TILE, Br=FA2_TILE)
    return [dq.double() * sc, dk.double(), dv_.double()]


def baseline_grad_reference(q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
    """FA's attention_ref(upcast=False) in q.dtype, softmax reduced in fp32; differentiable."""
    sdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    return _attention(q, k, v, attn_mask, is_causal, scale, sdt)
