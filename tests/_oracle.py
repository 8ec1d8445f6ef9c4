"""Test oracles: gfloat FormatInfo for an attnum FloatFormat, and exact comparison helpers."""

from __future__ import annotations

import numpy as np
import torch
from gfloat import RoundMode, decode_ndarray, round_ndarray
from gfloat.types import Domain, FormatInfo

from attnum.numerics.formats import FloatFormat

GF_MODES = {"nearest_even": RoundMode.TiesToEven, "toward_zero": RoundMode.TowardZero}


def gfloat_info(fmt: FloatFormat) -> FormatInfo:
    nans = {"ieee": 2**fmt.mbits - 1, "fn": 1, "none": 0}[fmt.specials]
    return FormatInfo(
        name=fmt.name, k=fmt.bits, precision=fmt.mbits + 1, bias=fmt.bias, is_signed=True,
        domain=Domain.Extended if fmt.specials == "ieee" else Domain.Finite, has_nz=True,
        num_high_nans=nans, has_subnormals=fmt.subnormals, is_twos_complement=False,
    )


def finite_values(fmt: FloatFormat) -> np.ndarray:
    """Every finite non-negative value of a format of <= 16 bits, sorted (decoded by gfloat)."""
    fi = gfloat_info(fmt)
    codes = np.arange(2 ** (fmt.bits - 1), dtype=np.int64)  # sign bit clear
    vals = decode_ndarray(fi, codes).astype(np.float64)
    return np.unique(vals[np.isfinite(vals)])


def gfloat_round(fmt: FloatFormat, x: np.ndarray, mode: str, saturate: bool) -> np.ndarray:
    sat = saturate or fmt.specials == "none"
    pts = x if fmt.has_nan else x[~np.isnan(x)]
    return round_ndarray(gfloat_info(fmt), pts, rnd=GF_MODES[mode], sat=sat)


def assert_same_floats(got: np.ndarray, want: np.ndarray, x: np.ndarray, label: str) -> None:
    """Bitwise agreement: same NaN positions, same values, same sign (signed zero included)."""
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    bad = (nan_g != nan_w) | (~nan_w & ((got != want) | (np.signbit(got) != np.signbit(want))))
    if bad.any():
        idx = np.flatnonzero(bad)[:8]
        detail = ", ".join(f"x={x[i]!r}: got {got[i]!r} want {want[i]!r}" for i in idx)
        raise AssertionError(f"{label}: {bad.sum()} of {x.size} points differ; {detail}")


def torch_round(x: np.ndarray, fmt, mode: str, saturate: bool, dtype) -> np.ndarray:
    from attnum import round_to

    t = torch.from_numpy(x.astype(np.float64 if dtype == torch.float64 else np.float32))
    return round_to(t, fmt, mode, saturate=saturate).double().numpy()
