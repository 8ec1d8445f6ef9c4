"""Attention specs -> callables with the SDPA signature.

A spec is one of
- a callable ``(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
  enable_gqa=False)``, returned unchanged;
- ``"eager"``: softmax(QK^T * scale) V written out op by op in the input dtype (the paper's
  "baseline attention"; under autocast it runs in the autocast dtype);
- ``"flash:POLICY"``: attnum's FlashAttention re-implementation under ``POLICY`` (any string
  ``attnum.policy.parse_policy`` accepts, e.g. ``flash:fp32``, ``flash:fa2:bf16,acc=fp16``); trainable
  through the recomputing backward in ``attnum.attention.flash_backward``;
- ``"baseline:POLICY"``: standard attention rounded per policy at every site, trainable (gradients
  rounded at the same sites); ``"golden"``: float64 attention;
- a real kernel name from ``attnum.kernels.registry`` (``torch-sdpa-flash``, ``torch-sdpa-math``, ...).

Shapes: q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv) -> out (B, H, N, dv) in ``query.dtype``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnum.errors import AttnumInputError

SdpaFn = Callable[..., torch.Tensor]
BUILTIN_SPECS = ("eager", "flash:POLICY", "baseline:POLICY", "golden")


def eager_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False):
    """softmax(QK^T * scale + mask) V, one op at a time, in the input dtype (differentiable)."""
    if dropout_p:
        raise AttnumInputError(f"dropout_p={dropout_p} is not supported; expected 0.0")
    H, G = query.shape[-3], key.shape[-3]
    if H != G:
        key = key.repeat_interleave(H // G, dim=-3)
        value = value.repeat_interleave(H // G, dim=-3)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    s_BHNS = (query @ key.transpose(-2, -1)) * scale
    N, S = s_BHNS.shape[-2:]
    if is_causal:
        keep = torch.ones(N, S, dtype=torch.bool, device=query.device).tril()
        s_BHNS = s_BHNS.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s_BHNS = s_BHNS.masked_fill(~attn_mask, float("-inf"))
        else:
            s_BHNS = s_BHNS + attn_mask.to(s_BHNS.dtype)
    p_BHNS = torch.softmax(s_BHNS, dim=-1)
    # Fully masked rows give 0, as torch >= 2.5 SDPA does.
    p_BHNS = torch.nan_to_num(p_BHNS, nan=0.0)
    return p_BHNS.to(value.dtype) @ value


def _reimplementation(kind: str, policy: str | None, **tiles) -> SdpaFn:
    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
        if dropout_p:
            raise AttnumInputError(f"dropout_p={dropout_p} is not supported by {kind}; expected 0.0")
        # Emulation must not be autocast: autocast would turn the float32 carrier's matmuls into
        # bf16/fp16 ones, silently changing the arithmetic the policy describes.
        with torch.autocast(device_type=query.device.type, enabled=False):
            out = _call(query, key, value, attn_mask, is_causal, scale)
        return out.to(query.dtype)

    def _call(query, key, value, attn_mask, is_causal, scale):
        if kind == "flash":
            from attnum.attention.flash import flash_attention

            out = flash_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                  policy=policy, **tiles)
        elif kind == "baseline":
            # The differentiable twin of baseline_attention: round_to's torch.round has zero gradient.
            from attnum.policy import parse_policy
            from attnum.training.grad_compare import baseline_attention_differentiable

            out = baseline_attention_differentiable(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                                    scale=scale, policy=parse_policy(policy))
        elif torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
            # golden_attention works in place and is not differentiable; same float64 math op by op.
            out = eager_attention(query.double(), key.double(), value.double(), attn_mask=attn_mask,
                                  is_causal=is_causal, scale=scale, enable_gqa=True)
        else:
            from attnum.attention.golden import golden_attention

            out = golden_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
        return out

    attention.__name__ = f"{kind}:{policy}" if policy else kind
    return attention


def resolve_attention(spec: str | SdpaFn, *, block_q: int | None = None, block_k: int | None = None) -> SdpaFn:
    """The SDPA-signature callable a spec names; unknown names fail with the list of known ones."""
    if callable(spec):
        return spec
    if not isinstance(spec, str) or not spec:
        raise AttnumInputError(f"attention={spec!r} is not allowed; expected a callable or a spec string")
    if spec == "eager":
        return eager_attention
    if spec == "golden":
        return _reimplementation("golden", None)
    kind, _, policy = spec.partition(":")
    if kind in ("flash", "baseline") and policy:
        from attnum.policy import parse_policy

        parse_policy(policy)  # fail early, with the policy parser's message
        tiles = {"block_q": block_q, "block_k": block_k} if kind == "flash" else {}
        return _reimplementation(kind, policy, **tiles)
    try:
        from attnum.kernels.registry import KERNELS, get_kernel
    except ImportError as err:  # registry not importable: say so rather than guessing
        raise AttnumInputError(f"attention={spec!r}: kernel registry unavailable ({err})") from err
    if spec in KERNELS:
        return get_kernel(spec).fn
    known = ", ".join([*BUILTIN_SPECS, *sorted(KERNELS)])
    raise AttnumInputError(f"attention={spec!r} is not allowed; expected one of {known}")


def check_spec(spec: str | SdpaFn, device: str = "cpu") -> None:
    """Fail before any work if ``spec`` is unknown, or names a real kernel this machine cannot run."""
    resolve_attention(spec)
    if isinstance(spec, str) and spec != "eager" and spec != "golden" and ":" not in spec:
        from attnum.kernels.registry import kernel_status

        ok, why = kernel_status(spec, device)
        if not ok:
            raise AttnumInputError(f"attention={spec!r} is not available here: {why}")


def describe(spec: str | SdpaFn) -> str:
    return spec if isinstance(spec, str) else getattr(spec, "__name__", repr(spec))
