"""The references every probe compares a target with: float64 golden and a same-precision baseline.

Shapes: q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv), H % G == 0; outputs (B, H, N, dv).

Nothing here computes attention: golden, baseline and the FA2 backward are the core's
(``attnum.attention``); this module only chooses their arguments.

Golden is ``attnum.golden_attention``: float64 on the target's own (low-precision) inputs, with
torch >= 2.5 mask semantics from ``attnum.attention.masks`` (bool True = attend, float masks added,
top-left ``is_causal``, empty rows -> 0). Its gradients are float64 autograd through it
(:mod:`attnum.audit.terms`, which also sizes each gradient element's terms).

The same-precision baseline is FlashAttention's ``attention_ref(upcast=False)`` ("out_pt"), the
yardstick of both flash-attn's and PyTorch's test suites: plain attention whose *materialised*
tensors - scores S, probabilities P = softmax(S), output O - are each rounded to the input dtype,
while the matmuls and the softmax reduce in float32 as torch's eager ops do; with FA's
``reorder_ops=True`` the scale is applied to K (rounded in the input dtype) rather than to QK^T. As a
core policy that is ``uniform:<dt>`` with ``exp`` and ``row_sum`` widened to fp32 (matmuls already
accumulate in fp32): see :func:`baseline_policy`. It is deliberately *not* torch's SDPA math backend:
on CPU that backend upcasts bf16/fp16 to float32 internally and rounds only the output (measured: its
bf16 error equals the fp32 result rounded once), so it is one of the candidates being judged, not the
yardstick of "what a straightforward kernel in this precision gets".

Gradient baselines: autograd through that same baseline (``baseline_attention`` rounds each site's
gradient where it rounds the value, as FA's suite differentiates ``attention_ref(upcast=False)``), and
FlashAttention-2's recompute-from-LSE backward (:func:`fa2_grads`).
"""

from __future__ import annotations

import math

import torch

from attnum.attention import masks
from attnum.attention.baseline import baseline_attention
from attnum.attention.flash import flash_attention
from attnum.attention.flash_backward import flash_backward
from attnum.attention.golden import golden_attention
from attnum.numerics.formats import format_of_dtype
from attnum.numerics.policy import Policy, parse_policy


def baseline_policy(dtype: torch.dtype) -> Policy:
    """FA's out_pt as a policy: S, P, O (and the PV product) in ``dtype``; softmax reductions in fp32."""
    fmt = format_of_dtype(dtype).name
    if fmt in ("fp32", "fp64"):
        return parse_policy(f"uniform:{fmt}")
    return parse_policy(f"uniform:{fmt},exp=fp32,row_sum=fp32")


def golden(q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
    """Float64 golden output (B, H, N, dv)."""
    return golden_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)


def baseline(q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
    """Same-precision baseline output (B, H, N, dv), values on q.dtype's grid; differentiable when
    the inputs require grad (gradients rounded at the same sites as the values)."""
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # FA's reorder_ops=True: K is scaled (and rounded) in the input dtype, so the baseline carries
    # the error of one reordering of the scaling, as kernels scale at different steps.
    return baseline_attention(q, (k * sc).to(k.dtype), v, attn_mask=attn_mask, is_causal=is_causal,
                              scale=1.0, policy=baseline_policy(q.dtype))


FA2_TILE = 64  # Br = Bc for the FA2 backward baseline (a common CPU/GPU tile)


def fa2_grads(q, k, v, dout, *, attn_mask=None, is_causal=False, scale=None) -> list[torch.Tensor]:
    """[dq, dk, dv] (float64) of FlashAttention-2's recompute-from-LSE backward in q.dtype (fa2:<dt>).

    FA2 is a standard same-precision algorithm whose gradients are inherently less accurate than
    differentiating materialised attention: D = rowsum(dO * O) uses the rounded output, and P is
    recomputed as exp(S - LSE) from an LSE formed and held in fp32 (the policy's ``lse`` site), whose
    absolute error (~|LSE| * eps) becomes a relative error of every P.
    """
    policy = parse_policy(f"fa2:{format_of_dtype(q.dtype).name}")
    B, H, _, N, S, d, _ = masks.check_qkv(q, k, v)
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out, lse = flash_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=sc, policy=policy,
                               block_q=FA2_TILE, block_k=FA2_TILE, return_lse=True)
    # FA's reorder_ops: the backward recomputes S from a pre-scaled Q, so its rounding of S is not
    # the forward's. Real kernels recompute S in a different kernel (other blocking, other order);
    # errors in S and in the LSE then no longer cancel in P = exp(S - LSE), which dominates the
    # gradient error at large logits. dL/dq = sc * dL/d(q * sc).
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S))
    dq, dk, dv_ = flash_backward(q.to(policy.carrier) * sc, k, v, out, lse, dout.to(policy.carrier), mk=mk,
                                 scale=1.0, policy=policy, Bc=FA2_TILE, Br=FA2_TILE)
    return [dq.double() * sc, dk.double(), dv_.double()]
