"""Rounding real values (carried in float32 or float64 tensors) onto a FloatFormat's grid.

The result is *correctly rounded from the carrier value*: one rounding, from the exact float64
(or float32) input, never through an intermediate format. torch's own float64 -> bf16/fp16/fp8
casts go through float32 and round twice (1 + 2**-8 + 2**-30 becomes 1.0 in bf16, not 1.0078125);
the paths here do not.

Paths:

- generic: ``frexp`` -> exponent clamped at the subnormal boundary -> scale so the format's
  quantum is 1 -> round to an integer (``torch.round`` is ties-to-even) -> scale back -> apply the
  format's overflow rule. Every step but the integer rounding is exact in the carrier.
- compiled (nearest-even and toward-zero, CPU, every format that fits the carrier): one pass of
  :mod:`attnum.numerics.jit` computing the same bits from the IEEE fields; the torch paths below stay the
  reference (``ATTNUM_JIT=0`` selects them) and the tests hold the two equal.
- native (nearest-even only): bf16 and fp16 from a float32 carrier use torch's cast, which rounds
  float32 correctly; from a float64 carrier the value is first rounded *to odd* into float32 (which
  keeps >= 2 more bits than the target, so the following nearest-even cast is correct).
"""

from __future__ import annotations

from typing import Literal

import torch

from attnum.errors import AttnumInputError
from attnum.numerics import jit
from attnum.numerics.formats import PRESETS, FloatFormat, get_format
from attnum.numerics.workspace import FRESH, Workspace

RoundingMode = Literal["nearest_even", "nearest_away", "toward_zero", "stochastic"]
MODES = ("nearest_even", "nearest_away", "toward_zero", "stochastic")
_CARRIERS = (torch.float32, torch.float64)
_NATIVE = {PRESETS["bf16"]: torch.bfloat16, PRESETS["fp16"]: torch.float16}  # by value: e8m7 is bf16
_FP32 = PRESETS["fp32"]
_FP64 = PRESETS["fp64"]


def round_to(
    x: torch.Tensor,
    fmt: str | FloatFormat,
    mode: RoundingMode = "nearest_even",
    *,
    generator: torch.Generator | None = None,
    saturate: bool = False,
) -> torch.Tensor:
    """Round every element of ``x`` to ``fmt``; returns a tensor of x's dtype and shape.

    ``mode``: ``nearest_even`` (IEEE default), ``nearest_away`` (ties away from zero: PTX's
    ``cvt.rna``, as for fp32 -> tf32), ``toward_zero`` (truncation; finite overflow gives max), or
    ``stochastic`` (rounds up with probability equal to the distance from the lower neighbour in ulps;
    reproducible with ``generator``).
    Overflow: inf for IEEE-like formats, NaN for ``fn`` formats, max for formats with neither,
    max for every format when ``saturate=True``. NaN and inf inputs propagate (inf becomes NaN in
    ``fn`` formats and max in formats without inf, as a hardware cast would). Signed zero is kept.
    """
    fmt = get_format(fmt)
    if not isinstance(x, torch.Tensor):
        raise AttnumInputError(f"x={type(x).__name__} is not allowed; expected a torch.Tensor")
    if x.dtype not in _CARRIERS:
        raise AttnumInputError(f"x.dtype={x.dtype} is not allowed; expected torch.float32 or torch.float64")
    if mode not in MODES:
        raise AttnumInputError(f"mode={mode!r} is not allowed; expected one of {MODES}")
    carrier = _FP32 if x.dtype == torch.float32 else _FP64
    if fmt.fits_in(carrier):
        if fmt == carrier:
            return x
        if _compiled(x, fmt, mode):
            src = x.detach().contiguous()
            out = torch.empty_like(src)
            jit.round_array_(src.view(-1).numpy(), out.view(-1).numpy(), fmt, mode, saturate)
            return out
        native = _NATIVE.get(fmt)
        if mode == "nearest_even" and native is not None:
            return _round_native(x, native, fmt, saturate)
        if fmt == _FP32 and mode == "nearest_even" and not saturate:
            return x.to(torch.float32).to(x.dtype)  # IEEE float64 -> float32: one correct rounding
        if x.dtype == torch.float32 and _e8_bits_ok(fmt, mode, saturate):
            return _round_e8_bits(x, fmt.mbits)
    return round_generic(x, fmt, mode, generator=generator, saturate=saturate)


def _compiled(x: torch.Tensor, fmt: FloatFormat, mode: str) -> bool:
    """The compiled one-pass kernel applies: a plain CPU tensor (no subclass: fake and distributed
    tensors keep torch's ops), a mode it has, no autograd graph to record, and not float64 -> fp32
    (one torch cast is already a single correct rounding)."""
    return (jit.enabled() and type(x) in (torch.Tensor, torch.nn.Parameter) and x.device.type == "cpu"
            and mode in jit.MODE_CODES and x.numel() > 0
            and not (x.requires_grad and torch.is_grad_enabled()) and not x.is_neg() and not x.is_conj()
            and not (fmt == _FP32 and mode == "nearest_even"))


def _e8_bits_ok(fmt: FloatFormat, mode: str, saturate: bool) -> bool:
    """fp32's own exponent (8 bits, IEEE specials, subnormals) with fewer mantissa bits: e8mY."""
    return fmt.ebits == 8 and fmt.specials == "ieee" and fmt.subnormals and mode == "nearest_even" and not saturate


def _round_e8_bits(x: torch.Tensor, mbits: int) -> torch.Tensor:
    """Nearest-even to e8mY on float32's bits: add half an ulp minus one (plus the kept LSB, for
    ties to even) and clear the dropped bits. A carry moves into the exponent (up a binade, or to inf
    past the max); fp32 subnormals round on e8mY's subnormal grid 2**(-126 - Y), which is the same
    bit position. NaN stays NaN (its bits could otherwise carry into the sign)."""
    drop = 23 - mbits
    bits = x.view(torch.int32)
    bias = torch.bitwise_right_shift(bits, drop).bitwise_and_(1).add_((1 << (drop - 1)) - 1)
    out = bits.add(bias).bitwise_and_(~((1 << drop) - 1)).view(torch.float32)
    return torch.where(torch.isnan(x), x, out)


class _RoundSTE(torch.autograd.Function):
    """round_to in the forward; the incoming gradient rounded to the same format in the backward."""

    @staticmethod
    def forward(ctx, x, fmt):
        ctx.fmt = fmt
        return round_to(x, fmt)

    @staticmethod
    def backward(ctx, g):
        return round_to(g, ctx.fmt), None


def round_ste(x: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    """Differentiable rounding: ``round_to(x, fmt)`` forward, gradient rounded to ``fmt`` backward.

    ``torch.round`` has a zero gradient, so an emulated implementation that must be trained
    through rounds with this instead: every site rounds its value on the way forward and the
    gradient of that value on the way back, as a kernel holding that tensor in ``fmt`` would.
    """
    fmt = get_format(fmt)
    if torch.is_grad_enabled() and x.requires_grad:
        return _RoundSTE.apply(x, fmt)
    return round_to(x, fmt)


def round_to_(
    x: torch.Tensor,
    fmt: str | FloatFormat,
    workspace: Workspace,
    mode: RoundingMode = "nearest_even",
    *,
    generator: torch.Generator | None = None,
    saturate: bool = False,
) -> torch.Tensor:
    """round_to in place in ``x`` where possible (returns the result: x itself, or a new tensor
    when x's carrier cannot hold the format), scratch tensors taken from ``workspace``.

    Same bits as round_to: bf16/fp16 from float32 go through torch's nearest-even conversion into
    a kept buffer and back; other formats through the in-place generic path.
    """
    fmt = get_format(fmt)
    carrier = _FP32 if x.dtype == torch.float32 else _FP64
    if fmt == carrier and x.dtype in _CARRIERS:
        return x
    if x.dtype not in _CARRIERS or not fmt.fits_in(carrier) or not x.is_contiguous():
        return round_to(x, fmt, mode, generator=generator, saturate=saturate)
    if _compiled(x, fmt, mode):
        flat = x.detach().view(-1).numpy()
        jit.round_array_(flat, flat, fmt, mode, saturate)
        return x
    native = _NATIVE.get(fmt)
    if mode == "nearest_even" and native is not None and x.dtype == torch.float32 and not saturate:
        buf = workspace.get("round.native", x.shape, native, x.device)
        buf.copy_(x)
        return x.copy_(buf)
    return round_generic_(x, fmt, workspace, mode, generator=generator, saturate=saturate)


def round_generic(
    x: torch.Tensor,
    fmt: FloatFormat,
    mode: RoundingMode = "nearest_even",
    *,
    generator: torch.Generator | None = None,
    saturate: bool = False,
) -> torch.Tensor:
    """The exact scale/round/scale-back path for any format (see the module docstring).

    Computes in float64 unless the carrier is float32 and every value of ``fmt`` is a float32,
    in which case float32 is exact too and twice as fast.
    """
    carrier = _FP32 if x.dtype == torch.float32 else _FP64
    work = x.clone() if fmt.fits_in(carrier) else x.double()
    return _round_in_place(work, fmt, mode, generator, saturate, FRESH).to(x.dtype)


def round_generic_(
    x: torch.Tensor,
    fmt: FloatFormat,
    workspace: Workspace,
    mode: RoundingMode = "nearest_even",
    *,
    generator: torch.Generator | None = None,
    saturate: bool = False,
) -> torch.Tensor:
    """round_generic in place in ``x`` (returned), scratch tensors taken from ``workspace``.

    ``x`` must be a contiguous float32 or float64 tensor whose dtype holds every value of ``fmt``.
    """
    carrier = _FP32 if x.dtype == torch.float32 else _FP64
    if x.dtype not in _CARRIERS or not fmt.fits_in(carrier) or not x.is_contiguous():
        raise AttnumInputError(f"x (dtype={x.dtype}) is not allowed for in-place rounding to {fmt.name}; "
                               "expected a contiguous carrier that holds every value of the format")
    return _round_in_place(x, fmt, mode, generator, saturate, workspace)


def _round_in_place(x, fmt: FloatFormat, mode: str, generator, saturate: bool, ws) -> torch.Tensor:
    """Round the signed values of ``x`` onto fmt's grid, in place.

    Divide by the format's quantum 2**q at each value's binade (exact: a power of two), round to
    an integer, multiply back. Nearest-even and truncation are symmetric in the sign and
    floor(y + U[0,1)) is unbiased for either sign, so the sign never needs splitting off.
    """
    if x.numel() == 0:
        return x
    shift, bias, itype = (23, 127, torch.int32) if x.dtype == torch.float32 else (52, 1023, torch.int64)
    lo, hi = torch.aminmax(x)
    # Only an input beyond max can round beyond max; NaN and inf land here too (comparisons fail).
    in_range = bool(-fmt.max <= lo) and bool(hi <= fmt.max)
    src = None if in_range else x.clone()
    # Biased binade exponent read from the bits (exact, unlike log2), clamped to the format's
    # subnormal binade below and just past its largest binade above.
    e = torch.bitwise_right_shift(x.view(itype), shift, out=ws.get("round.e", x.shape, itype, x.device))
    e = e.bitwise_and_(2 * bias + 1).clamp_(fmt.emin + bias, fmt.emax + 1 + bias)
    if _one_step(fmt, bias):
        quantum = e.sub_(fmt.mbits).bitwise_left_shift_(shift).view(x.dtype)  # 2**q from its bits
        x = x.div_(quantum)
    else:  # 2**q does not fit the carrier for every q: two halves, each a normal number
        e = e.sub_(fmt.mbits + bias)  # q
        half = torch.bitwise_right_shift(e, 1, out=ws.get("round.half", x.shape, itype, x.device))
        p1 = e.sub_(half).add_(bias).bitwise_left_shift_(shift).view(x.dtype)
        p2 = half.add_(bias).bitwise_left_shift_(shift).view(x.dtype)
        x = x.div_(p1).div_(p2)
    if mode == "nearest_even":
        x = x.round_()  # ties to even
    elif mode == "nearest_away":  # x - trunc(x) is exact, so a tie is seen exactly
        t = x.trunc()
        x = torch.where((x - t).abs() == 0.5, t + x.sign(), x.round())
    elif mode == "toward_zero":
        x = x.trunc_()
    else:
        x = x.add_(torch.rand(x.shape, generator=generator, dtype=x.dtype, device=x.device)).floor_()
    x = x.mul_(quantum) if _one_step(fmt, bias) else x.mul_(p1).mul_(p2)
    if not fmt.subnormals:
        x = x.mul_(~(x.abs() < fmt.tiny))  # flush to zero; multiplying by 0 keeps the sign
    return x if src is None else _apply_overflow_(x, src, fmt, mode, saturate)


def _one_step(fmt: FloatFormat, bias: int) -> bool:
    """2**q is a normal carrier number for every quantum q = E - mbits of the format."""
    return 1 <= fmt.emin - fmt.mbits + bias and fmt.emax + 1 - fmt.mbits + bias <= 2 * bias


def _apply_overflow_(r: torch.Tensor, src: torch.Tensor, fmt: FloatFormat, mode: str, saturate: bool) -> torch.Tensor:
    """In place: rounded values r beyond max follow the format; inf inputs follow it too; NaN stays
    NaN. ``src`` is the input before rounding (r may have overflowed the carrier itself)."""
    a = r.abs()
    over = a > fmt.max
    if not bool(over.any()):
        return r
    finite_over = over & torch.isfinite(src)
    clamp = saturate or fmt.specials == "none" or mode == "toward_zero"
    if fmt.specials == "ieee":
        a.masked_fill_(finite_over, fmt.max if clamp else float("inf"))
        if saturate:
            a.masked_fill_(torch.isinf(src), fmt.max)
    elif fmt.specials == "fn":
        a.masked_fill_(finite_over, fmt.max if (saturate or mode == "toward_zero") else float("nan"))
        a.masked_fill_(torch.isinf(src), fmt.max if saturate else float("nan"))
    else:
        a.masked_fill_(over, fmt.max)  # no inf, no NaN: only saturation is possible
    return r.copy_(a.copysign_(src))


def _round_native(x: torch.Tensor, dtype: torch.dtype, fmt: FloatFormat, saturate: bool) -> torch.Tensor:
    """Nearest-even through torch's float32 cast, made single-rounding for float64 input."""
    x32 = _to_float32_round_to_odd(x) if x.dtype == torch.float64 else x
    r = x32.to(dtype).to(x.dtype)
    if saturate:
        r = torch.where(torch.isinf(r), torch.copysign(torch.full_like(r, fmt.max), r), r)
    return r


def _to_float32_round_to_odd(x: torch.Tensor) -> torch.Tensor:
    """float64 -> float32 rounding to odd: truncate, then set the last bit if anything was lost.

    A round-to-odd result with p >= q + 2 bits rounds correctly to q bits afterwards (Boldo and
    Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
    odd", IEEE TC 2008), so float32 is a safe stepping stone to bf16 and fp16.
    """
    a = x.abs()
    f = a.to(torch.float32)
    back = f.to(torch.float64)
    bits = f.view(torch.int32)
    bits = torch.where(back > a, bits - 1, bits)  # the cast rounded up: step back toward zero
    inexact = (back != a) & torch.isfinite(a)
    bits = torch.where(inexact, bits | 1, bits)
    return torch.copysign(bits.view(torch.float32), x.to(torch.float32))
