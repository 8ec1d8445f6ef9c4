"""Quantized tensors: FP8/int8 values with fp32 scales, KV caches, and the Hadamard rotation.

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

from attnum.errors import AttnumInputError, bad_value
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.rounding import round_to

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


def fp32_scale(scale: float) -> float:
    """A per-tensor scale as kernels hold it: rounded once to fp32."""
    return float(round_to(torch.tensor([float(scale)], dtype=torch.float64), _FP32))


def per_tensor_fp8(x: torch.Tensor, fmt: str, scale: float) -> torch.Tensor:
    """x (any shape, any float dtype) as a serving stack's FP8 writer stores it at a static per-tensor ``scale``
    (held in fp32, :func:`fp32_scale`): x / scale (float64) clamped to the format's +-max, then rounded once
    (site ``quant``), as vLLM's ``QuantFP8`` (clamp, then the cast) and its Triton cache writer (a store through
    ``cvt.rn.satfinite``) do: +-inf and finite overflow become +-max, NaN stays NaN. Returns the values (float64,
    on ``fmt``'s grid); the value a kernel computes with is values * fp32_scale(scale), exact in float64. (vLLM
    divides in fp32 first: a second rounding that moves a value only at a tie of the FP8 grid.)"""
    f = quant_format(fmt)
    if f == "int8":
        raise bad_value("fmt", fmt, "an FP8 format (e4m3fn, e5m2)")
    top = get_format(f).max
    y = (x.double() / fp32_scale(scale)).clamp(-top, top)
    return round_to(y, f) if y.numel() else y  # site: quant


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
