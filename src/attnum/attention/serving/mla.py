"""Multi-head latent attention (DeepSeek-V2/V3), explicit and absorbed, with a bf16 or FP8 latent cache.

Shape alphabet: B batch, H heads, N queries, S cached tokens, r latent rank (kv_lora_rank, 512 in
DeepSeek-V3), dn per-head no-RoPE dim (128), dr decoupled-RoPE dim (64, one key part shared by all
heads), dv value dim (128).

The cache holds per token the latent c_KV (r) and the RoPE key k_R (dr). Per head h,
K_h = c_KV W_UK[h] (S, dn) and V_h = c_KV W_UV[h] (S, dv); the score of query n and token j is
scale * (q_nope[h, n] . K_h[j] + q_rope[h, n] . k_R[j]) with scale = 1 / sqrt(dn + dr).

- **explicit** (vLLM's "compute-friendly" MHA path for prefill): the cache is dequantized to the
  compute format, K_h and V_h are up-projected (fp32-accumulated GEMMs, rounded to the compute
  format: sites ``k_up``, ``v_up``), then multi-head attention over d = dn + dr under ``policy``.
- **absorbed** (FlashMLA and vLLM's "data-movement friendly" MQA path for decode): W_UK is folded
  into the query, q'_h = q_nope[h] W_UK[h]^T (N, r), rounded to the compute format (site
  ``q_absorb``); attention runs as MQA (one KV head) over the latent: keys [c_KV, k_R] (r + dr),
  values c_KV (dv = r); its latent output (B, H, N, r), rounded at ``out`` as FlashMLA writes it,
  is up-projected by W_UV[h] (site ``o_up``), which a model folds into W_O.

In exact arithmetic both equal softmax(scores) V_h. The golden value is the explicit path in float64.

Caches (the ``cache`` argument): ``"bf16"`` (or any float format of 16 bits or more: fp16, fp32,
fp64); ``"fp8_ds_mla"``, FlashMLA's "FP8 with scale" layout
(vLLM's ``fp8_ds_mla``): c_KV in e4m3fn with one calibrated fp32 scale per token per 128 latent
channels, k_R in bf16, dequantized to bf16 in the kernel; or any :class:`Quantization` applied to
c_KV alone (``granularity`` over tokens of the latent; k_R kept in the compute format).
"""

from __future__ import annotations

import math

import torch

from attnum.attention import steps
from attnum.attention.flash import flash_attention
from attnum.attention.golden import golden_attention
from attnum.attention.lowbit.quant import Quantization, quantize
from attnum.errors import AttnumInputError, bad_value
from attnum.numerics.formats import get_format
from attnum.numerics.policy import Policy, parse_policy
from attnum.numerics.rounding import round_to

CACHES = ("bf16", "fp16", "fp32", "fp64", "fp8_ds_mla")
DS_MLA_GROUP = 128  # FlashMLA: 4 fp32 scales for 512 e4m3 NoPE values, one per 128
_FP32 = get_format("fp32")


def check_mla(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv) -> tuple[int, int, int, int, int, int, int, int]:
    """Validate shapes; returns B, H, N, S, r, dn, dr, dv."""
    for name, t in (("q_nope", q_nope), ("q_rope", q_rope), ("c_kv", c_kv), ("k_rope", k_rope),
                    ("w_uk", w_uk), ("w_uv", w_uv)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise bad_value(name, type(t).__name__, "a floating torch.Tensor")
    if q_nope.dim() != 4 or q_rope.dim() != 4 or c_kv.dim() != 3 or k_rope.dim() != 3 or w_uk.dim() != 3 or w_uv.dim() != 3:
        raise AttnumInputError("MLA shapes are not allowed; expected q_nope (B, H, N, dn), q_rope (B, H, N, dr), "
                               "c_kv (B, S, r), k_rope (B, S, dr), w_uk (H, r, dn), w_uv (H, r, dv)")
    B, H, N, dn = q_nope.shape
    S, r = c_kv.shape[1], c_kv.shape[2]
    dr, dv = q_rope.shape[-1], w_uv.shape[-1]
    check_rank(r, H, dn)
    want = {"q_rope": (B, H, N, dr), "c_kv": (B, S, r), "k_rope": (B, S, dr), "w_uk": (H, r, dn), "w_uv": (H, r, dv)}
    for name, t in (("q_rope", q_rope), ("c_kv", c_kv), ("k_rope", k_rope), ("w_uk", w_uk), ("w_uv", w_uv)):
        if tuple(t.shape) != want[name]:
            raise bad_value(f"{name}.shape", tuple(t.shape), f"{want[name]} (from q_nope {tuple(q_nope.shape)}, c_kv rank)")
    return B, H, N, S, r, dn, dr, dv


def check_rank(rank, heads: int, head_dim: int) -> int:
    """The latent rank must be a positive integer no larger than the key width it compresses, H * dn."""
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= heads * head_dim:
        raise bad_value("mla_rank", rank, f"an integer in 1..heads*head_dim = {heads * head_dim}")
    return rank


def cache_latent(c_kv: torch.Tensor, cache: str | Quantization, compute) -> tuple[torch.Tensor, int]:
    """c_kv (B, S, r) as the kernel reads it: stored in ``cache``, dequantized to ``compute``.
    Returns (the latent in the compute format, float64; the quantization overflow count)."""
    if isinstance(cache, Quantization):
        qt = quantize(c_kv.double()[:, None], cache)  # (B, 1, S, r): the latent as one KV head
        return qt.dequantize(compute)[:, 0], qt.overflow
    if cache == "fp8_ds_mla":
        B, S, r = c_kv.shape
        if r % DS_MLA_GROUP:
            raise bad_value("mla_rank", r, f"a multiple of {DS_MLA_GROUP} for the fp8_ds_mla cache")
        groups = c_kv.double().reshape(B, S, r // DS_MLA_GROUP, DS_MLA_GROUP).transpose(1, 2)  # (B, r/128, S, 128)
        qt = quantize(groups, Quantization(fmt="e4m3fn", granularity="token"))
        return round_to(qt.dequantize("bf16").transpose(1, 2).reshape(B, S, r), compute), qt.overflow
    try:
        stored = get_format(cache, param="cache")
    except AttnumInputError:
        stored = None
    if stored is None or stored.bits <= 8:
        raise bad_value("cache", cache, f"one of {CACHES}, a float format of 16+ bits (fp16, fp32, fp64), "
                        "or a Quantization (FP8 and int8 need scales)")
    return round_to(round_to(c_kv.double(), stored), compute), 0


@steps.no_autocast
def mla_attention(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    c_kv: torch.Tensor,
    k_rope: torch.Tensor,
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    *,
    absorbed: bool = False,
    cache: str | Quantization = "bf16",
    policy: str | Policy = "fa2:bf16",
    is_causal: bool = False,
    causal_alignment: str = "bottom_right",
    scale: float | None = None,
    block_k: int = 64,
    return_overflow: bool = False,
):
    """MLA output per head (B, H, N, dv), float64 holding values of the policy's ``out`` format.

    ``policy``'s ``inputs`` format is the compute format: queries, weights, the dequantized cache and
    every up-projection are rounded to it; attention is the core's :func:`flash_attention` with
    ``block_k`` keys per tile (FlashMLA: 64-token pages and tiles). Causal masking aligns
    bottom-right (query n is token S - N + n), as decode kernels do.
    """
    B, H, N, S, r, dn, dr, dv = check_mla(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv)
    policy = parse_policy(policy)
    f = policy.inputs
    scale = 1.0 / math.sqrt(dn + dr) if scale is None else float(scale)
    c, over = cache_latent(c_kv, cache, f)  # (B, S, r)
    kr = round_to(k_rope.double(), f)  # (B, S, dr)
    qn, qr, wk, wv = (round_to(t.double(), f) for t in (q_nope, q_rope, w_uk, w_uv))
    kw = dict(is_causal=is_causal, causal_alignment=causal_alignment, scale=scale, policy=policy, block_k=block_k)
    if not absorbed:
        k_up = _gemm(c[:, None], wk[None], f)  # site k_up: (B, H, S, dn)
        v_up = _gemm(c[:, None], wv[None], f)  # site v_up: (B, H, S, dv)
        k_full = torch.cat([k_up, kr[:, None].expand(B, H, S, dr)], dim=-1)
        out = flash_attention(torch.cat([qn, qr], dim=-1), k_full, v_up, **kw).double()
    else:
        q_abs = _gemm(qn, wk[None].transpose(-1, -2), f)  # site q_absorb: (B, H, N, r)
        k_lat = torch.cat([c, kr], dim=-1)[:, None]  # (B, 1, S, r + dr): MQA over the latent
        o_lat = flash_attention(torch.cat([q_abs, qr], dim=-1), k_lat, c[:, None], **kw).double()  # (B, H, N, r)
        out = round_to(_gemm(o_lat, wv[None], f), policy.out)  # site o_up: (B, H, N, dv)
    return (out, over) if return_overflow else out


def mla_golden(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, *, is_causal: bool = False,
               causal_alignment: str = "bottom_right", scale: float | None = None) -> torch.Tensor:
    """The explicit path in float64 (K_h, V_h up-projected in float64, then golden attention)."""
    B, H, N, S, r, dn, dr, dv = check_mla(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv)
    scale = 1.0 / math.sqrt(dn + dr) if scale is None else float(scale)
    c = c_kv.double()[:, None]
    k_full = torch.cat([c @ w_uk.double()[None], k_rope.double()[:, None].expand(B, H, S, dr)], dim=-1)
    q_full = torch.cat([q_nope.double(), q_rope.double()], dim=-1)
    return golden_attention(q_full, k_full, c @ w_uv.double()[None], is_causal=is_causal,
                            causal_alignment=causal_alignment, scale=scale)


def _gemm(a: torch.Tensor, b: torch.Tensor, f) -> torch.Tensor:
    """a @ b as a GEMM on ``f`` values: accumulated in fp32 when f fits fp32 (as tensor cores do),
    in float64 otherwise, then rounded once to ``f``."""
    if f.fits_in(_FP32):
        return round_to((a.float() @ b.float()).double(), f)
    return round_to(a @ b, f)
