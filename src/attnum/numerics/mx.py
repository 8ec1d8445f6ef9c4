"""Block-scaled formats as data: OCP microscaling (MX) and NVIDIA's NVFP4.

A block format stores ``block`` consecutive values along the last dimension (the dot-product
dimension) as elements of a narrow :class:`~attnum.numerics.formats.FloatFormat` times one shared scale:

- **MX** (OCP Microscaling Formats Specification v1.0, Sec. 5-6): blocks of 32, the scale an
  **e8m0** power of two. Sec. 6.3's conversion: ``shared_exp = floor(log2(amax)) - emax_elem``
  (emax_elem: the exponent of the element format's largest binade), clamped below to e8m0's
  -127; each element ``round(x / 2**shared_exp)`` to nearest-even, normal overflow clamped to the
  element format's max. MXFP8 (e4m3fn, e5m2), MXFP6 (e3m2fn, e2m3fn), MXFP4 (e2m1fn).
- **NVFP4** (NVIDIA Blackwell; SageAttention3, arXiv 2505.11594): blocks of 16 e2m1 values, an
  e4m3fn scale per block, and a per-tensor fp32 scale ``s_t = amax(x) / (6 * 448)`` so that every
  block scale ``round_e4m3(amax_block / (6 * s_t))`` lies in e4m3's range.

**e8m0** (:data:`E8M0`) is a scale-only format: 8 exponent bits, bias 127, no sign and no
mantissa; codes 0..254 are 2**(code - 127), code 255 is NaN (ml_dtypes ``float8_e8m0fnu``).

Every rounding is one :func:`attnum.round_to` from the float64 quotient ``x / scale``; an MX scale
is a power of two, so that quotient is exact. NVFP4's scale has up to 28 bits; its float64
quotient is rounded once by the hardware's division too, as in :mod:`attnum.attention.lowbit.qformats`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.errors import bad_value
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.rounding import round_to

_FP32 = get_format("fp32")


@dataclass(frozen=True, kw_only=True)
class PowerOfTwoFormat:
    """A scale-only format: ``ebits`` exponent bits with ``bias``, no sign, no mantissa; the
    all-ones code is NaN (OCP e8m0). Values: 2**(code - bias) for code in 0 .. 2**ebits - 2."""

    ebits: int = 8
    bias: int = 127
    name: str = "e8m0"

    @property
    def emin(self) -> int:
        return -self.bias

    @property
    def emax(self) -> int:
        return 2**self.ebits - 2 - self.bias

    @property
    def nan_code(self) -> int:
        return 2**self.ebits - 1

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Integer codes -> float64 values (NaN for the NaN code)."""
        e = codes.to(torch.float64) - self.bias
        return torch.where(codes == self.nan_code, torch.full_like(e, math.nan), torch.exp2(e))

    def encode(self, exponents: torch.Tensor) -> torch.Tensor:
        """Integer exponents in emin..emax -> codes (int64)."""
        return exponents.to(torch.int64) + self.bias


E8M0 = PowerOfTwoFormat()


@dataclass(frozen=True, kw_only=True)
class BlockFormat:
    """``block`` elements of ``elem`` share one scale of ``scale_format`` (``e8m0`` or a FloatFormat
    name such as ``e4m3fn``); ``tensor_scale``: a per-tensor fp32 scale above the block scales (NVFP4)."""

    elem: str | FloatFormat
    block: int = 32
    scale_format: str = "e8m0"
    tensor_scale: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "elem", get_format(self.elem, param="elem"))
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1:
            raise bad_value("block", self.block, "a positive integer (elements per shared scale)")
        if self.scale_format != "e8m0":
            object.__setattr__(self, "scale_format", get_format(self.scale_format, param="scale_format").name)
        if self.tensor_scale and self.scale_format == "e8m0":
            raise bad_value("tensor_scale", self.tensor_scale, "False with an e8m0 scale (MX has no tensor scale)")
        if not self.name:
            object.__setattr__(self, "name", f"{self.elem.name}/{self.block}/{self.scale_format}")

    @property
    def scale_fmt(self) -> PowerOfTwoFormat | FloatFormat:
        return E8M0 if self.scale_format == "e8m0" else get_format(self.scale_format)

    @property
    def bits_per_value(self) -> float:
        sbits = E8M0.ebits if self.scale_format == "e8m0" else get_format(self.scale_format).bits
        return self.elem.bits + sbits / self.block


BLOCK_FORMATS: dict[str, BlockFormat] = {
    "mxfp8-e4m3": BlockFormat(elem="e4m3fn", name="mxfp8-e4m3"),
    "mxfp8-e5m2": BlockFormat(elem="e5m2", name="mxfp8-e5m2"),
    "mxfp6-e3m2": BlockFormat(elem="e3m2fn", name="mxfp6-e3m2"),
    "mxfp6-e2m3": BlockFormat(elem="e2m3fn", name="mxfp6-e2m3"),
    "mxfp4": BlockFormat(elem="e2m1fn", name="mxfp4"),
    "nvfp4": BlockFormat(elem="e2m1fn", block=16, scale_format="e4m3fn", tensor_scale=True, name="nvfp4"),
}


def get_block_format(spec: str | BlockFormat, *, param: str = "block_format") -> BlockFormat:
    if isinstance(spec, BlockFormat):
        return spec
    key = str(spec).strip().lower()
    if key not in BLOCK_FORMATS:
        raise bad_value(param, spec, f"one of {sorted(BLOCK_FORMATS)}")
    return BLOCK_FORMATS[key]


@dataclass(frozen=True)
class BlockQuantized:
    """values (..., n) float64 on the element grid; scales (..., n / block, 1) float64 holding
    values of the scale format; tensor_scale a float64 scalar tensor (1 when the format has none);
    clamped: how many blocks had their scale exponent clamped up to the scale format's minimum."""

    values: torch.Tensor
    scales: torch.Tensor
    tensor_scale: torch.Tensor
    fmt: BlockFormat
    clamped: int = 0

    def dequantize(self, to: str | FloatFormat | None = None) -> torch.Tensor:
        """values * block scale * tensor scale, exact in float64; ``to``: rounded once to it."""
        shape = self.values.shape
        blocks = self.values.reshape(*shape[:-1], -1, self.fmt.block)
        x = (blocks * (self.scales * self.tensor_scale)).reshape(shape)
        return x if to is None else round_to(x, to)


def _blocks(x: torch.Tensor, fmt: BlockFormat) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1:
        raise bad_value("x", getattr(x, "shape", type(x).__name__), "a floating tensor with at least one dimension")
    n = x.shape[-1]
    if n % fmt.block:
        raise bad_value("block", fmt.block, f"a divisor of the last dimension ({n}) for {fmt.name}")
    return x.double().reshape(*x.shape[:-1], n // fmt.block, fmt.block)


def block_quantize(x: torch.Tensor, fmt: str | BlockFormat) -> BlockQuantized:
    """x (..., n) -> :class:`BlockQuantized` (see the module docstring); n a multiple of the block."""
    fmt = get_block_format(fmt)
    xb = _blocks(x, fmt)
    amax = xb.abs().amax(dim=-1, keepdim=True)
    if fmt.scale_format == "e8m0":
        t = torch.ones((), dtype=torch.float64)
        _, e = torch.frexp(amax)  # amax = m 2**e, m in [0.5, 1): floor(log2 amax) = e - 1
        shared = torch.where(amax > 0, e.to(torch.float64) - 1 - fmt.elem.emax, torch.full_like(amax, E8M0.emin))
        finite = torch.isfinite(amax)
        if bool((shared[finite] > E8M0.emax).any()):
            raise bad_value("scale_format", "e8m0", f"a scale format holding every block's exponent (<= {E8M0.emax}); "
                            "this input has a block with amax beyond 2**128 * the element max")
        clamped = int((shared[finite] < E8M0.emin).sum())
        scales = torch.exp2(shared.clamp(min=E8M0.emin))
        scales = torch.where(finite, scales, torch.full_like(scales, math.nan))
    else:
        sf = get_format(fmt.scale_format)
        t, scales, clamped = _float_scales(amax, fmt, sf)
    y = xb / (scales * t)
    values = round_to(y, fmt.elem, saturate=True)  # site: quant (OCP: normal overflow clamps to max)
    return BlockQuantized(values.reshape(x.shape), scales, t, fmt, clamped)


def _float_scales(amax: torch.Tensor, fmt: BlockFormat, sf: FloatFormat):
    """NVFP4-style scales: per-tensor fp32 t = amax / (elem max * scale max), then per block
    round(amax_b / (elem max * t)) in the scale format (0 blocks get scale 1)."""
    emax = fmt.elem.max
    finite = amax[torch.isfinite(amax)]
    if fmt.tensor_scale:
        top = float(finite.max()) if finite.numel() else 0.0
        t = round_to(torch.tensor(top / (emax * sf.max) if top > 0 else 1.0, dtype=torch.float64), _FP32)
    else:
        t = torch.ones((), dtype=torch.float64)
    raw = amax / (emax * t)
    s = round_to(raw, sf)  # site: block scale
    over = torch.isfinite(amax) & ~torch.isfinite(s)
    if bool(over.any()):
        hi = float(raw[over].max())
        raise bad_value("scale_format", sf.name, f"a scale format holding every block's scale amax/{emax:g} (here up "
                        f"to {hi:.3g}; {sf.name} holds up to {sf.max:g}); use the per-tensor scale (tensor_scale=True)")
    under = (s == 0) & (amax > 0)  # a block too small for the scale format: its smallest scale instead
    s = torch.where(under, torch.full_like(s, sf.smallest_subnormal), s)
    return t, torch.where(s > 0, s, torch.ones_like(s)), int(under.sum())


def element_grid(fmt: FloatFormat) -> torch.Tensor:
    """Every non-negative finite value of ``fmt``, ascending, float64 (index parity = mantissa LSB)."""
    codes = 2 ** (fmt.ebits + fmt.mbits)
    e = torch.arange(codes) // 2**fmt.mbits
    m = (torch.arange(codes) % 2**fmt.mbits).double()
    sub = e == 0
    vals = torch.where(sub, m * 2.0 ** (fmt.emin - fmt.mbits),
                       (1 + m / 2**fmt.mbits) * torch.exp2((e - fmt.bias).double()))
    return vals[vals <= fmt.max]


def block_quantize_reference(x: torch.Tensor, fmt: str | BlockFormat) -> BlockQuantized:
    """The plain reference of :func:`block_quantize`: the same scales computed element by element
    with Python floats, each element the nearest grid value found by search over the whole grid
    (ties to the even code). Slow; for tests on small tensors."""
    fmt = get_block_format(fmt)
    xb = _blocks(x, fmt)
    grid = element_grid(fmt.elem).tolist()
    amaxes = xb.abs().amax(dim=-1).reshape(-1).tolist()
    if fmt.scale_format == "e8m0":
        t = 1.0
        exps = [max(E8M0.emin, math.floor(math.log2(a)) - fmt.elem.emax) if a > 0 else E8M0.emin for a in amaxes]
        scales = [2.0**e for e in exps]
    else:
        sf = get_format(fmt.scale_format)
        top = max(amaxes)
        t = float(torch.tensor(top / (fmt.elem.max * sf.max), dtype=torch.float32)) if fmt.tensor_scale and top else 1.0
        sgrid = element_grid(sf).tolist()
        scales = [(_nearest(a / (fmt.elem.max * t), sgrid) or sf.smallest_subnormal) if a > 0 else 1.0 for a in amaxes]
    flat = xb.reshape(-1, fmt.block).tolist()
    out = [[math.copysign(_nearest(abs(v) / (s * t), grid), v) for v in row] for row, s in zip(flat, scales)]
    values = torch.tensor(out, dtype=torch.float64).reshape(x.shape)
    sc = torch.tensor(scales, dtype=torch.float64).reshape(*xb.shape[:-1], 1)
    return BlockQuantized(values, sc, torch.tensor(t, dtype=torch.float64), fmt)


def _nearest(a: float, grid: list[float]) -> float:
    """The grid value nearest ``a`` >= 0 (ties: even index); beyond the top: the top (saturation)."""
    if a >= grid[-1]:
        return grid[-1]
    best = min(range(len(grid)), key=lambda i: (abs(grid[i] - a), i % 2))
    return grid[best]
