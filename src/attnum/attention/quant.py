"""Quantized attention: FP8/int8 values with scales, KV caches, incoherent processing, FP8 attention.

Shape alphabet: B batch, H query heads, G key/value heads, N queries, S keys (tokens), d head dim,
dv value dim, nb blocks of tokens.

A tensor x (B, H, S, d) is stored as values on a grid plus scales, x ~= values * scale:

- ``fmt``: ``e4m3fn`` or ``e5m2`` (values on the FP8 grid by :func:`attnum.round_to`; overflow as the
  format says -- NaN for e4m3fn, inf for e5m2 -- or max with ``saturate=True``), or ``int8``
  (symmetric, integers -127..127, round to nearest even, clamped: int8 always saturates).
- ``granularity``: one scale per ``tensor``; per ``head`` (one per (b, h), as FA3's descale tensors
  (batch, num_heads_k) and vLLM's per-head k/v scales); per ``block`` of ``block`` tokens (FA3's
  block quantization: one scale per Br x d or Bc x d tile); per ``token``.
- ``scale``: ``"calibrated"`` (amax / format max over each granule, so the largest value lands on
  the format's max) or a fixed positive number (vLLM's default KV scale is 1.0).

Scales are fp32 values (as every kernel holds them). Quantizing divides x / scale in float64 and
rounds once to the format at the site named ``quant``; dequantizing multiplies back exactly (a
4- or 8-bit value times a 24-bit scale fits float64) and optionally rounds once to a compute format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.attention import masks, steps
from attnum.attention.baseline import baseline_attention
from attnum.attention.flash import kv_tile_order
from attnum.errors import AttnumInputError, bad_value
from attnum.formats import FloatFormat, get_format
from attnum.policy import Policy
from attnum.rounding import round_to

FORMATS = ("e4m3fn", "e5m2", "int8")
GRANULARITIES = ("tensor", "head", "block", "token")
INT8_MAX = 127
# int8's grid {-127..127}, scaled by u = 2**-132, is the uniform bottom of e8m6 (its subnormals and
# first normal binade are the multiples of u below 2**7 u): integer rounding, ties to even, is
# round_to onto this format, so no rounding happens outside round_to.
_INT_GRID = FloatFormat(ebits=8, mbits=6, specials="none", name="int-grid")
_FP32 = get_format("fp32")


def quant_format(fmt: str) -> str:
    """Canonical name of a quantization format: e4m3fn, e5m2 or int8 (aliases: fp8, fp8_e4m3,
    fp8_e5m2, float8_e4m3fn, e4m3, ...), else the one-line input error."""
    key = str(fmt).strip().lower()
    if key == "int8":
        return "int8"
    key = key.removeprefix("fp8_") if key != "fp8" else key
    try:
        name = get_format(key).name
    except AttnumInputError:
        name = None
    if name not in FORMATS:
        raise bad_value("fmt", fmt, f"one of {FORMATS} (aliases fp8, fp8_e4m3, fp8_e5m2, float8_e4m3fn, ...)")
    return name


def format_max(fmt: str) -> float:
    """The largest magnitude a quantized value may take (448 e4m3fn, 57344 e5m2, 127 int8)."""
    return float(INT8_MAX) if fmt == "int8" else get_format(fmt).max


@dataclass(frozen=True, kw_only=True)
class Quantization:
    """How a tensor is quantized: format, scale granularity, fixed or calibrated scale, overflow rule."""

    fmt: str = "e4m3fn"
    granularity: str = "tensor"
    scale: float | str = "calibrated"
    block: int = 128
    saturate: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", quant_format(self.fmt))
        if self.granularity not in GRANULARITIES:
            raise bad_value("granularity", self.granularity, f"one of {GRANULARITIES}")
        if isinstance(self.scale, str):
            if self.scale != "calibrated":
                object.__setattr__(self, "scale", parse_scale(self.scale))
        elif isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not (
                math.isfinite(self.scale) and self.scale > 0):
            raise bad_value("scale", self.scale, "a positive finite number or 'calibrated'")
        else:
            object.__setattr__(self, "scale", float(self.scale))
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1:
            raise bad_value("block", self.block, "a positive integer (tokens per scale)")
        if not isinstance(self.saturate, bool):
            raise bad_value("saturate", self.saturate, "True or False")

    @property
    def calibrated(self) -> bool:
        return self.scale == "calibrated"


def parse_scale(text: str | float) -> float | str:
    """A CLI ``--kv-scale``: ``calibrated`` or a positive finite number."""
    if isinstance(text, str) and text.strip().lower() == "calibrated":
        return "calibrated"
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise bad_value("scale", text, "a positive finite number or 'calibrated'")
    return value


@dataclass(frozen=True)
class Quantized:
    """values (B, H, S, d) float64 on the format's grid; scales float64 holding fp32 values, shaped
    (1, 1, 1, 1) tensor, (B, H, 1, 1) head, (B, H, nb, 1) block, (B, H, S, 1) token; overflow: how
    many finite inputs fell beyond the format's max (NaN/inf, or clamped when saturating)."""

    values: torch.Tensor
    scales: torch.Tensor
    overflow: int
    config: Quantization

    def token_scales(self) -> torch.Tensor:
        """The scales broadcastable to ``values``: (1|B, 1|H, 1|S, 1)."""
        if self.config.granularity != "block":
            return self.scales
        S = self.values.shape[-2]
        return self.scales.repeat_interleave(self.config.block, dim=-2)[..., :S, :]

    def dequantize(self, to: str | FloatFormat | None = None) -> torch.Tensor:
        """values * scales (exact in float64); ``to``: then rounded once to that compute format."""
        x = self.values * self.token_scales()
        return x if to is None else round_to(x, to)

    @property
    def nbytes(self) -> int:
        """Storage: one byte per value, four per fp32 scale."""
        return self.values.numel() + 4 * self.scales.numel()


def quantize(x: torch.Tensor, cfg: Quantization) -> Quantized:
    """x (B, H, S, d), any float dtype -> :class:`Quantized` (see the module docstring)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 4:
        raise bad_value("x", getattr(x, "shape", type(x).__name__), "a 4-D (B, H, S, d) floating tensor")
    x = x.double()
    s = _granule_scales(x, cfg)
    full = Quantized(x, s, 0, cfg).token_scales()
    y = x / full
    if y.numel() == 0:  # round_to needs at least one element
        return Quantized(y, s, 0, cfg)
    if cfg.fmt == "int8":
        u = _INT_GRID.smallest_subnormal
        r = round_to(y * u, _INT_GRID) / u  # site: quant (integers, ties to even)
        over = int((torch.isfinite(y) & (r.abs() > INT8_MAX)).sum())
        values = r.clamp(-INT8_MAX, INT8_MAX)
    else:
        values = round_to(y, cfg.fmt)  # site: quant
        over = int((torch.isfinite(y) & ~torch.isfinite(values)).sum())
        if cfg.saturate and over:
            values = round_to(y, cfg.fmt, saturate=True)
    return Quantized(values, s, over, cfg)


def _granule_scales(x: torch.Tensor, cfg: Quantization) -> torch.Tensor:
    """One fp32 scale per granule: amax / format max (1 where the granule is all zero), or fixed."""
    B, H, S, _ = x.shape
    a = x.abs()
    if a.numel() == 0:  # an empty cache: no granule has data
        shape = {"tensor": (1, 1, 1, 1), "head": (B, H, 1, 1), "token": (B, H, S, 1),
                 "block": (B, H, -(-S // cfg.block), 1)}[cfg.granularity]
        amax = torch.zeros(shape, dtype=x.dtype, device=x.device)
    elif cfg.granularity == "tensor":
        amax = a.amax().reshape(1, 1, 1, 1)
    elif cfg.granularity == "head":
        amax = a.amax(dim=(-2, -1), keepdim=True)
    elif cfg.granularity == "token":
        amax = a.amax(dim=-1, keepdim=True)
    else:
        nb = -(-S // cfg.block)
        pad = torch.zeros(B, H, nb * cfg.block - S, x.shape[-1], dtype=x.dtype, device=x.device)
        amax = torch.cat([a, pad], dim=-2).reshape(B, H, nb, -1).amax(dim=-1, keepdim=True)
    if not cfg.calibrated:
        return round_to(torch.full_like(amax, cfg.scale), _FP32)
    if not bool(torch.isfinite(amax).all()):
        raise AttnumInputError("x has NaN or inf values; a calibrated scale needs finite data (fix a scale instead)")
    s = torch.where(amax > 0, amax / format_max(cfg.fmt), torch.ones_like(amax))
    return round_to(s, _FP32)


@dataclass(frozen=True)
class QuantizedKVCache:
    """A quantized KV cache for decode: k and v (B, G, S, d) each as :class:`Quantized`.

    Kernels (vLLM, FlashInfer, FlashMLA) dequantize in the kernel: ``dequantize(to)`` gives the
    (k, v) a decode kernel computes with, values * scale rounded once to its compute dtype."""

    k: Quantized
    v: Quantized

    @property
    def overflow(self) -> int:
        return self.k.overflow + self.v.overflow

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def dequantize(self, to: str | FloatFormat | None = "bf16") -> tuple[torch.Tensor, torch.Tensor]:
        return self.k.dequantize(to), self.v.dequantize(to)


def quantize_kv_cache(k: torch.Tensor, v: torch.Tensor, cfg: Quantization,
                      v_cfg: Quantization | None = None) -> QuantizedKVCache:
    """k, v (B, G, S, d) -> their quantized cache (separate scales for k and v, as vLLM's k_scale
    and v_scale); ``v_cfg`` defaults to ``cfg``."""
    return QuantizedKVCache(quantize(k, cfg), quantize(v, v_cfg or cfg))


KV_CACHE_DTYPES = ("auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")


def kv_cache_quantization(kv_cache_dtype: str, kv_scale: float | str = "calibrated", *,
                          granularity: str = "tensor", block: int = 128, saturate: bool = False) -> Quantization | None:
    """A decode config's ``--kv-cache-dtype``/``--kv-scale`` as a :class:`Quantization`, vLLM's names:
    ``auto``/``bf16``/``fp16`` store the cache unquantized (None); ``fp8`` (= ``fp8_e4m3``, e4m3fn),
    ``fp8_e5m2`` and ``int8`` quantize it with ``kv_scale`` (a number, vLLM's default 1.0, or
    ``calibrated``: amax / format max)."""
    key = str(kv_cache_dtype).strip().lower()
    if key not in KV_CACHE_DTYPES:
        raise bad_value("kv_cache_dtype", kv_cache_dtype, f"one of {KV_CACHE_DTYPES}")
    if key in ("auto", "bf16", "fp16"):
        return None
    return Quantization(fmt=key, granularity=granularity, scale=parse_scale(kv_scale), block=block, saturate=saturate)


def random_hadamard(d: int, seed: int = 0, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """R = diag(random signs) H_d / sqrt(d) (d x d, orthogonal): FA3's and QuaRot's incoherent
    processing. H_d is Sylvester's Walsh-Hadamard matrix, so d must be a power of two."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 1 or d & (d - 1):
        raise bad_value("head_dim", d, "a power of two for the Hadamard rotation")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    g = torch.Generator().manual_seed(int(seed))
    signs = torch.randint(0, 2, (d,), generator=g, dtype=torch.float64) * 2 - 1
    return (signs[:, None] * h / math.sqrt(d)).to(dtype)


def rotate(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """x (..., d) @ R in float64 (Q and K take the same R, so (Q R)(K R)^T = Q K^T)."""
    return x.double() @ r


# FA3/FA4 exponentiate with an offset of 8 in log2 (hopper/softmax.h ``Max_offset``; FA4 PR #2109:
# "+8.0 offset, 256x row_sum compensation"): P~ = 2**8 exp(s - m) lies in [0, 256], so small
# probabilities stay clear of e4m3's subnormals; the factor cancels in O = acc / l.
FA3_P_SCALE = 256.0
FP8_GRANULARITIES = ("tensor", "head", "block")


def fp8_policy(fmt: str, out: str | FloatFormat = "bf16", softmax: str | FloatFormat = "fp32") -> Policy:
    """The sites of FP8 attention: Q, K, V and P in ``fmt``; the GEMMs accumulate in fp32; scores,
    exponentials, statistics and the accumulator in ``softmax`` (fp32 in FA3); output in ``out``."""
    w = get_format(softmax)
    return Policy(inputs=fmt, scores=w, exp=w, probs=fmt, row_sum=w, rescale=w, acc="fp32", out="fp32",
                  matmul_acc="fp32", normalize="reciprocal", name=f"fp8:{fmt},softmax={w.name}")


@steps.no_autocast
def fp8_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    fmt: str = "e4m3fn",
    granularity: str = "block",
    block: int = 128,
    incoherent: bool = True,
    seed: int = 0,
    p_scale: float = FA3_P_SCALE,
    kv_order: str = "forward",
    out: str | FloatFormat = "bf16",
    saturate: bool = False,
    return_stats: bool = False,
):
    """FlashAttention-3's FP8 forward (Shah et al. 2024, Sec. 3.3) -> (B, H, N, dv) float32 on ``out``'s grid.

    1. Incoherent processing (``incoherent``): Q and K times one random Hadamard R (seeded), in float64.
    2. Q, K, V quantized to ``fmt`` with calibrated fp32 scales per ``granularity``; ``block`` is
       both the quantization block and the tile (Br = Bc), as in FA3's block quantization.
    3. Per KV tile (online softmax, FA2 Algorithm 1): S = (Q8 K8^T accumulated in fp32) times the
       descale ``scale * q_scale * k_scale`` (fp32); m, P = exp(S - m), l, alpha in fp32;
       P cast to ``fmt`` as round(P * p_scale) for the P V GEMM (fp32 accumulation), whose
       result is multiplied by v_scale / p_scale.
    4. O = acc * (1 / l), rounded to ``out`` (bf16).
    ``return_stats``: also a dict with each input's overflow count and how many non-zero P
    underflowed to 0 in ``fmt`` (the P-collapse of arXiv 2606.06521).
    """
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    if granularity not in FP8_GRANULARITIES:
        raise bad_value("granularity", granularity, f"one of {FP8_GRANULARITIES} (per-token V scales would vary "
                        "along the P V reduction; use block)")
    cfg = _fp8_config(fmt, granularity, block, saturate)
    if not (isinstance(p_scale, (int, float)) and math.isfinite(p_scale) and p_scale > 0):
        raise bad_value("p_scale", p_scale, "a positive finite number (FA3: 256)")
    order = kv_tile_order(-(-S // block), kv_order)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S), causal_alignment=causal_alignment, window=window)
    q, k = _incoherent(q, k, incoherent, seed, d)
    qq, kq, vq = quantize(q, cfg), quantize(k, cfg), quantize(v, cfg)
    policy = fp8_policy(cfg.fmt, out)
    c, dev = torch.float32, q.device
    q8 = qq.values.to(c)
    k8, v8 = (masks.expand_kv(t.values.to(c), H) for t in (kq, vq))
    sq = qq.token_scales()  # (1|B, 1|H, 1|N, 1)
    sk, sv = (masks.expand_kv(t.token_scales(), H) for t in (kq, vq))  # (1|B, H, 1|S, 1)
    m = torch.full((B, H, N, 1), float("-inf"), dtype=c, device=dev)  # m_i
    l = torch.zeros((B, H, N, 1), dtype=c, device=dev)  # l_i
    acc = torch.zeros((B, H, N, dv), dtype=c, device=dev)  # O_i (unnormalized)
    underflow = nonzero = 0
    for j in order:
        j0, j1 = j * block, min(S, (j + 1) * block)
        sk_j = sk if sk.shape[-2] == 1 else sk[..., j0:j1, :]
        sv_j = sv if sv.shape[-2] == 1 else sv[..., j0:j0 + 1, :]  # one scale per tile (block == Bc)
        descale = policy.round("scores", (scale * sq) * sk_j.transpose(-1, -2)).to(c)  # softmax_scale_eff
        s = steps.matmul(q8, k8[:, :, j0:j1].transpose(-1, -2), policy).mul_(descale)  # S_ij, fp32
        s = _mask_(s, mk.tile(0, N, j0, j1, c, dev), policy)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = steps.safe_max(m_new)
        p = policy.round("exp", steps.exp_shifted_(s, m_safe))  # P~_ij
        alpha = policy.round("rescale", torch.exp(m - m_safe))
        l = policy.round("row_sum", alpha * l + p.sum(-1, keepdim=True))
        p8 = policy.round("probs", p * p_scale)  # P cast to FP8 for the GEMM
        if return_stats:
            underflow += int(((p > 0) & (p8 == 0)).sum())
            nonzero += int((p > 0).sum())
        pv = steps.matmul(p8, v8[:, :, j0:j1], policy)
        pv = pv.mul_(policy.round("acc", sv_j.to(torch.float64) / p_scale).to(c))
        acc = policy.round("acc", acc.mul_(alpha).add_(pv))
        m = m_new
    o = steps.zero_empty_rows_(acc * policy.round("row_sum", 1.0 / l), l)
    o = round_to(o, out)
    if not return_stats:
        return o
    return o, {"overflow": {"q": qq.overflow, "k": kq.overflow, "v": vq.overflow},
               "p_underflow": underflow, "p_nonzero": nonzero}


@steps.no_autocast
def fp8_baseline_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    fmt: str = "e4m3fn",
    incoherent: bool = False,
    seed: int = 0,
    softmax: str | FloatFormat = "fp32",
    out: str | FloatFormat = "bf16",
    saturate: bool = False,
    return_stats: bool = False,
):
    """Baseline FP8 attention: per-tensor scales, materialized scores and softmax (the core's
    :func:`baseline_attention` on the quantized values, its scale the descale
    ``scale * q_scale * k_scale``), the normalized P cast straight to ``fmt`` for the P V GEMM
    (as FA3's FP8 test reference, ``intermediate_dtype=fp8``), O * v_scale rounded to ``out``.
    """
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    cfg = _fp8_config(fmt, "tensor", 128, saturate)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    q, k = _incoherent(q, k, incoherent, seed, d)
    qq, kq, vq = quantize(q, cfg), quantize(k, cfg), quantize(v, cfg)
    descale = float(round_to(torch.tensor(scale * qq.scales.item() * kq.scales.item(), dtype=torch.float64), _FP32))
    o = baseline_attention(qq.values.float(), kq.values.float(), vq.values.float(), attn_mask=attn_mask,
                           is_causal=is_causal, scale=descale, causal_alignment=causal_alignment, window=window,
                           policy=fp8_policy(cfg.fmt, out, softmax))
    o = round_to(o * vq.scales.float(), out)
    if not return_stats:
        return o
    return o, {"overflow": {"q": qq.overflow, "k": kq.overflow, "v": vq.overflow}}


def _fp8_config(fmt: str, granularity: str, block: int, saturate: bool) -> Quantization:
    cfg = Quantization(fmt=fmt, granularity=granularity, block=block, saturate=saturate)
    if cfg.fmt == "int8":
        raise bad_value("fmt", fmt, "e4m3fn or e5m2 for FP8 attention (int8 is for KV caches)")
    return cfg


def _incoherent(q, k, on: bool, seed: int, d: int):
    if not on:
        return q, k
    r = random_hadamard(d, seed)
    return rotate(q, r), rotate(k, r)


def _mask_(s: torch.Tensor, tile: masks.Tile, policy: Policy) -> torch.Tensor:
    """The tile's additive mask (rounded at ``scores``) and -inf masking, as steps.scores does."""
    if tile.additive is not None:
        s = policy.round("scores", s.add_(tile.additive))
    return masks.apply_keep_(s, tile.keep) if tile.keep is not None else s
