"""The compiled rounding kernel (attnum.numerics.jit) against the torch reference paths (ATTNUM_JIT=0) and ml_dtypes.

The exhaustive tests of test_rounding.py already run through the compiled kernel (round_to uses it on
CPU); here: wide and unusual formats, both carriers, both modes, saturation, in place, and ml_dtypes'
own float64 casts, which are single roundings too.
"""

import functools
import os

import numpy as np
import pytest
import torch
from _oracle import assert_same_floats

from attnum import round_to
from attnum.numerics import jit
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.rounding import round_to_
from attnum.numerics.workspace import Workspace

pytestmark = pytest.mark.skipif(not jit.enabled(), reason="numba not importable")

FORMATS = ["bf16", "fp16", "e4m3fn", "e5m2", "e3m2fn", "e2m1fn", "e11m40", "e10m20-nosub", "e11m52-nosub", FloatFormat(ebits=8, mbits=10, specials="fn"),
           FloatFormat(ebits=6, mbits=9, specials="none"), FloatFormat(ebits=11, mbits=30, specials="none")]


def _points(fmt: FloatFormat, dtype: np.dtype, n: int = 8_000, seed: int = 0) -> np.ndarray:
    """Random values over the format's whole range and past it (subnormals of the format and of the
    carrier included), every one also moved to the midpoint of its format neighbours (ties) and one
    carrier ulp either side of that midpoint, both signs, and the specials."""
    rng = np.random.default_rng(seed)
    fin = np.finfo(dtype)
    lo, hi = max(fmt.emin - fmt.mbits - 3, int(np.log2(fin.smallest_subnormal))), min(fmt.emax + 3, fin.maxexp - 1)
    x = np.ldexp(1 + rng.random(n), rng.integers(lo, hi, n)).astype(dtype)
    q = np.ldexp(1.0, np.maximum(np.frexp(x.astype(np.float64))[1] - 1, fmt.emin) - fmt.mbits)  # the quantum
    with np.errstate(over="ignore"):
        mid = ((np.floor(x / q) + 0.5) * q).astype(dtype)
        pts = np.concatenate([x, mid, np.nextafter(mid, dtype.type(np.inf)), np.nextafter(mid, dtype.type(0)),
                              np.array([0.0, np.inf, np.nan, fin.max, fin.smallest_subnormal, fmt.max], dtype)])
    return np.concatenate([pts, -pts]).astype(dtype)


def _reference(x: torch.Tensor, fmt, mode, saturate, monkeypatch) -> torch.Tensor:
    with monkeypatch.context() as m:
        m.setenv("ATTNUM_JIT", "0")
        assert not jit.enabled()
        return round_to(x, fmt, mode, saturate=saturate)


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_compiled_equals_reference(fmt, dtype, monkeypatch):
    fmt = get_format(fmt)
    if not fmt.fits_in(get_format("fp32" if dtype == np.float32 else "fp64")):
        pytest.skip("the format does not fit the carrier: the reference path runs")
    x = torch.from_numpy(_points(fmt, np.dtype(dtype), seed=fmt.bits))
    for mode in ("nearest_even", "toward_zero"):
        for saturate in (False, True):
            want = _reference(x, fmt, mode, saturate, monkeypatch).double().numpy()
            got = round_to(x, fmt, mode, saturate=saturate).double().numpy()
            assert_same_floats(got, want, x.double().numpy(), f"{fmt} {mode} sat={saturate}")
            inplace = round_to_(x.clone(), fmt, Workspace(), mode, saturate=saturate).double().numpy()
            assert_same_floats(inplace, want, x.double().numpy(), f"{fmt} {mode} sat={saturate} in place")


ML = {"bf16": "bfloat16", "fp16": "float16", "e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2",
      "e3m2fn": "float6_e3m2fn", "e2m3fn": "float6_e2m3fn", "e2m1fn": "float4_e2m1fn"}


@pytest.mark.parametrize("name", list(ML))
def test_ml_dtypes_float64_casts_agree(name):
    """ml_dtypes casts from float64 in one rounding (ties, subnormals, overflow: inf for e5m2/bf16/fp16,
    NaN for e4m3fn, saturation for the MX formats without specials): 0 disagreements with round_to."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fmt = get_format(name)
    x = _points(fmt, np.dtype(np.float64), seed=3)
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16 if name == "fp16" else getattr(ml_dtypes, ML[name])).astype(np.float64)
    assert_same_floats(round_to(torch.from_numpy(x), fmt).numpy(), want, x, name)


@functools.lru_cache(maxsize=1)
def _count_rne32_mismatches():
    from numba import njit, prange

    from attnum.numerics.jit import _bits32, _from_bits32, rne, rne32

    @njit(cache=False, error_model="numpy", parallel=True)
    def count(a64, a32):
        """Every float32 bit pattern: rne32 on float32's bits against rne from the exact float64 value
        (two NaNs count as equal); the number of mismatches. 256 chunks of 2**24 patterns over numba's
        threads; each chunk's loop is branch-free and vectorizes."""
        bad = 0
        for hi in prange(1 << 8):
            first = (hi << 24) - (1 << 31)
            chunk = 0
            for lo in range(1 << 24):
                x = _from_bits32(np.int32(first + lo))
                got = rne32(x, a32[0], a32[1], a32[2], a32[3], a32[4], a32[5], a32[6])
                want = np.float32(rne(np.float64(x), a64[0], a64[1], a64[2], a64[3], a64[4], a64[5], a64[6]))
                chunk += (_bits32(got) != _bits32(want)) & ((got == got) | (want == want))
            bad += chunk
        return bad
    return count


@pytest.mark.skipif("ATEN_CPU_CAPABILITY" in os.environ,
                    reason="numba compiles for the host CPU whatever torch's capability: the CI's first run covers it")
@pytest.mark.parametrize("fmt", [f for f in FORMATS if jit.rne32_applies(get_format(f), np.float32, np.float32)],
                         ids=str)
def test_float32_kernel_on_every_float32(fmt):
    """jit.rne32 (nearest-even on float32's own bits) gives the bits of the float64 kernel on all 2**32
    float32 inputs, with and without saturation: an exhaustive proof, not a sample."""
    fmt = get_format(fmt)
    count = _count_rne32_mismatches()
    for saturate in (False, True):
        bad = count(jit.rne_args(fmt, saturate), jit.rne32_args(fmt, saturate))
        assert bad == 0, f"{fmt} saturate={saturate}: {bad} of the 2**32 float32 inputs differ"


def test_float32_kernel_applies_where_exact():
    """rne32 is chosen only for formats inside fp32's normal range with fewer mantissa bits than fp32."""
    assert jit.rne32_applies(get_format("bf16"), np.float32, np.float32)
    assert not jit.rne32_applies(get_format("bf16"), np.float64, np.float64)
    assert not jit.rne32_applies(get_format("fp32"), np.float32, np.float32)  # 23 mantissa bits: nothing dropped
    assert not jit.rne32_applies(FloatFormat(ebits=9, mbits=2, specials="none"), np.float32, np.float32)
