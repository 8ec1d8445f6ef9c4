"""Binary floating-point formats as data.

A :class:`FloatFormat` is described by its fields (exponent bits, mantissa bits, what the top
codes mean, whether subnormals exist); everything else -- bias, max, tiny, the smallest
subnormal, eps -- is derived from them, never copied.

Special-value policies (``specials``):

- ``"ieee"``: the all-ones exponent is reserved for inf (mantissa 0) and NaN (fp64, fp32, tf32,
  bf16, fp16, e5m2 and every ``eXmY`` name).
- ``"fn"``: OCP "finite" formats -- no inf; NaN only at the all-ones code, so the top binade keeps
  every mantissa but the last (e4m3fn: max 448).
- ``"none"``: no inf and no NaN; every code is a finite number (OCP MX e3m2fn, e2m3fn, e2m1fn).
  Overflow can only saturate. A NaN in the carrier stays NaN: the format has no code for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from attnum.errors import AttnumInputError

Specials = Literal["ieee", "fn", "none"]
_SPECIALS = ("ieee", "fn", "none")


@dataclass(frozen=True, kw_only=True)
class FloatFormat:
    """A sign-exponent-mantissa format with a biased exponent (bias = 2**(ebits-1) - 1)."""

    ebits: int
    mbits: int
    specials: Specials = "ieee"
    subnormals: bool = True
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.ebits, int) or not 2 <= self.ebits <= 11:
            raise AttnumInputError(f"ebits={self.ebits!r} is not allowed; expected an integer in 2..11")
        if not isinstance(self.mbits, int) or not 1 <= self.mbits <= 52:
            raise AttnumInputError(f"mbits={self.mbits!r} is not allowed; expected an integer in 1..52")
        if self.specials not in _SPECIALS:
            raise AttnumInputError(f"specials={self.specials!r} is not allowed; expected one of {_SPECIALS}")
        if self.specials == "fn" and self.ebits + self.mbits < 3:
            raise AttnumInputError(f"specials='fn' needs at least 3 exponent+mantissa bits, got e{self.ebits}m{self.mbits}")
        if not self.name:
            sub = "" if self.subnormals else "-nosub"
            suffix = {"ieee": "", "fn": "fn", "none": "fn"}[self.specials]
            object.__setattr__(self, "name", f"e{self.ebits}m{self.mbits}{suffix}{sub}")

    # ---- derived constants -------------------------------------------------------------------
    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def bias(self) -> int:
        return 2 ** (self.ebits - 1) - 1

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal binade."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite binade."""
        top = 2**self.ebits - 1  # the all-ones exponent field
        return (top - 1 if self.specials == "ieee" else top) - self.bias

    @property
    def max(self) -> float:
        """Largest finite value."""
        top_mantissa_codes = 2**self.mbits - (1 if self.specials == "fn" else 0)  # fn: last code is NaN
        return _pow2(self.emax) * (1 + (top_mantissa_codes - 1) / 2**self.mbits)

    @property
    def tiny(self) -> float:
        """Smallest positive normal value."""
        return _pow2(self.emin)

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value (the smallest normal when subnormals are off)."""
        return _pow2(self.emin - self.mbits) if self.subnormals else self.tiny

    @property
    def eps(self) -> float:
        """Distance from 1 to the next larger value."""
        return _pow2(-self.mbits)

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.specials in ("ieee", "fn")

    def fits_in(self, other: FloatFormat) -> bool:
        """Every value of ``self`` is a value of ``other`` (so rounding to ``self`` in ``other`` is exact)."""
        return (
            self.mbits <= other.mbits
            and self.emax <= other.emax
            and self.emin - (self.mbits if self.subnormals else 0)
            >= other.emin - (other.mbits if other.subnormals else 0)
        )

    def __str__(self) -> str:
        return self.name


def _pow2(e: int) -> float:
    return float.fromhex(f"0x1p{e}")


def _ieee(name: str, e: int, m: int) -> FloatFormat:
    return FloatFormat(ebits=e, mbits=m, specials="ieee", name=name)


PRESETS: dict[str, FloatFormat] = {
    "fp64": _ieee("fp64", 11, 52),
    "fp32": _ieee("fp32", 8, 23),
    "tf32": _ieee("tf32", 8, 10),
    "bf16": _ieee("bf16", 8, 7),
    "fp16": _ieee("fp16", 5, 10),
    "e5m2": _ieee("e5m2", 5, 2),
    "e4m3fn": FloatFormat(ebits=4, mbits=3, specials="fn", name="e4m3fn"),
    "e3m2fn": FloatFormat(ebits=3, mbits=2, specials="none", name="e3m2fn"),
    "e2m3fn": FloatFormat(ebits=2, mbits=3, specials="none", name="e2m3fn"),
    "e2m1fn": FloatFormat(ebits=2, mbits=1, specials="none", name="e2m1fn"),
}
ALIASES: dict[str, str] = {
    "float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "float8_e5m2": "e5m2", "float8_e4m3fn": "e4m3fn",
    "fp8": "e4m3fn", "e4m3": "e4m3fn",
}
_EXMY = re.compile(r"^e(\d+)m(\d+)(-nosub)?$")
_ALLOWED = f"one of {sorted(PRESETS)}, an alias {sorted(ALIASES)}, or 'eXmY' with 2<=X<=11, 1<=Y<=52"


def get_format(fmt: str | FloatFormat, *, param: str = "format") -> FloatFormat:
    """Resolve a name (preset, alias, ``eXmY``, optional ``-nosub`` suffix) or pass a FloatFormat through."""
    if isinstance(fmt, FloatFormat):
        return fmt
    if not isinstance(fmt, str):
        raise AttnumInputError(f"{param}={fmt!r} is not allowed; expected {_ALLOWED}")
    key = fmt.strip().lower()
    nosub = key.endswith("-nosub")
    base = key[: -len("-nosub")] if nosub else key
    base = ALIASES.get(base, base)
    if base in PRESETS:
        f = PRESETS[base]
        if nosub:
            return FloatFormat(ebits=f.ebits, mbits=f.mbits, specials=f.specials, subnormals=False,
                               name=f"{f.name}-nosub")
        return f
    match = _EXMY.match(key)
    if match:
        e, m = int(match.group(1)), int(match.group(2))
        if 2 <= e <= 11 and 1 <= m <= 52:
            return FloatFormat(ebits=e, mbits=m, subnormals=not nosub)
    raise AttnumInputError(f"{param}={fmt!r} is not allowed; expected {_ALLOWED}")


def format_names() -> list[str]:
    return list(PRESETS)


# The one table between format names and torch dtypes (formats torch can hold natively).
# Every other module asks these two functions; none keeps its own name table.
TORCH_DTYPE_NAMES: dict[str, str] = {
    "fp64": "float64", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
    "e5m2": "float8_e5m2", "e4m3fn": "float8_e4m3fn",
}


def torch_dtype(fmt: str | FloatFormat, *, param: str = "format"):
    """The torch dtype that holds ``fmt`` natively (fp64, fp32, bf16, fp16, e5m2, e4m3fn)."""
    import torch

    f = get_format(fmt, param=param)
    name = TORCH_DTYPE_NAMES.get(f.name)
    dtype = getattr(torch, name, None) if name else None
    if dtype is None:
        raise AttnumInputError(f"{param}={getattr(fmt, 'name', fmt)!r} is not allowed here; expected a format torch "
                               f"has a dtype for: {sorted(TORCH_DTYPE_NAMES)}")
    return dtype


def format_of_dtype(dtype, *, param: str = "dtype") -> FloatFormat:
    """The FloatFormat of a torch floating dtype (torch.bfloat16 -> bf16)."""
    for fname, tname in TORCH_DTYPE_NAMES.items():
        if str(dtype) == f"torch.{tname}":
            return PRESETS[fname]
    raise AttnumInputError(f"{param}={dtype} is not allowed; expected one of "
                           f"{['torch.' + t for t in TORCH_DTYPE_NAMES.values()]}")
