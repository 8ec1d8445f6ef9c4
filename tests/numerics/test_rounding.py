"""round_to against gfloat and torch's native casts: exhaustive for formats of <= 16 bits."""

import math

import numpy as np
import pytest
import torch
from _oracle import assert_same_floats, finite_values, gfloat_round, torch_round

from attnum import round_to
from attnum.numerics.formats import PRESETS, FloatFormat, get_format
from attnum.numerics.rounding import round_generic

SMALL = [n for n in PRESETS if PRESETS[n].bits <= 16]
GRID = [f"e{e}m{m}" for e in range(2, 9) for m in range(1, 16 - e) if f"e{e}m{m}" not in ("e8m7", "e5m10", "e5m2")]
NOSUB = ["bf16-nosub", "fp16-nosub", "e4m3-nosub"]


def exhaustive_points(fmt: FloatFormat, dtype=np.float64) -> np.ndarray:
    """Every value, every midpoint, each midpoint's neighbours in the carrier, both signs, and the
    overflow / underflow / subnormal edges."""
    v = finite_values(fmt)
    mid = (v[:-1] + v[1:]) / 2
    top_ulp = v[-1] - v[-2]
    edges = [fmt.max + top_ulp / 2, fmt.max + top_ulp / 4, fmt.max + top_ulp, 2 * fmt.max, math.inf,
             fmt.smallest_subnormal / 2, 0.75 * fmt.smallest_subnormal, 0.25 * fmt.smallest_subnormal,
             fmt.tiny * (1 - fmt.eps / 4), math.nan]
    with np.errstate(over="ignore"):  # edges past float32's range become inf in a float32 carrier
        pos = np.concatenate([v, mid, np.array(edges)]).astype(dtype)
    nb = mid.astype(dtype)
    pos = np.concatenate([pos, np.nextafter(nb, dtype(np.inf)), np.nextafter(nb, dtype(-np.inf))])
    pos = pos[~(np.abs(pos) > 1e300) | np.isinf(pos)]
    return np.concatenate([pos, -pos])


@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero"])
@pytest.mark.parametrize("saturate", [False, True], ids=["ieee_overflow", "saturate"])
@pytest.mark.parametrize("name", SMALL + GRID)
def test_exhaustive_float64_carrier(name, mode, saturate):
    fmt = get_format(name)
    x = exhaustive_points(fmt)
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    got = torch_round(x, fmt, mode, saturate, torch.float64)
    assert_same_floats(got, gfloat_round(fmt, x, mode, saturate), x, f"{name} {mode} sat={saturate}")


@pytest.mark.parametrize("name", NOSUB)
def test_subnormals_off_flushes_after_rounding(name):
    """Without subnormals, a result whose rounded magnitude is below tiny becomes a signed zero
    (tininess detected after rounding); everything else rounds as in the format with subnormals."""
    fmt = get_format(name)
    full = get_format(name.replace("-nosub", ""))
    x = exhaustive_points(full)
    want = gfloat_round(full, x, "nearest_even", False)
    want = np.where(np.abs(want) < fmt.tiny, np.copysign(0.0, want), want)
    got = torch_round(x, fmt, "nearest_even", False, torch.float64)
    assert_same_floats(got, want, x, name)


@pytest.mark.parametrize("name", SMALL + ["e6m9", "e7m8", "e3m4"])
def test_exhaustive_float32_carrier(name):
    fmt = get_format(name)
    with np.errstate(over="ignore"):
        x = exhaustive_points(fmt, np.float32).astype(np.float64)
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    got = torch_round(x, fmt, "nearest_even", False, torch.float32)
    assert_same_floats(got, gfloat_round(fmt, x, "nearest_even", False), x, f"{name} float32 carrier")


# torch's float32 -> float8_e4m3fn cast saturates (2.13: 480 and inf become 448), unlike the OCP
# non-saturating conversion that round_to does by default; compare it with saturate=True.
@pytest.mark.parametrize("name,dtype,saturate", [("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
                                                 ("e5m2", torch.float8_e5m2, False),
                                                 ("e4m3fn", torch.float8_e4m3fn, True)])
def test_matches_torch_cast_from_float32(name, dtype, saturate):
    with np.errstate(over="ignore"):
        x = torch.from_numpy(exhaustive_points(get_format(name), np.float32))
    want = x.to(dtype).to(torch.float32).double().numpy()
    got = round_to(x, name, saturate=saturate).double().numpy()
    assert_same_floats(got, want, x.double().numpy(), f"{name} vs torch cast")


def test_generic_path_equals_native_path():
    x = torch.from_numpy(exhaustive_points(get_format("bf16")))
    assert torch.equal(round_to(x, "bf16").isnan(), round_generic(x, get_format("bf16")).isnan())
    a, b = round_to(x, "bf16"), round_generic(x, get_format("bf16"))
    ok = ~a.isnan()
    assert torch.equal(a[ok], b[ok])


def test_no_double_rounding_from_float64():
    x = torch.tensor([1 + 2**-8 + 2**-30], dtype=torch.float64)
    assert round_to(x, "bf16").item() == 1.0078125
    assert x.to(torch.bfloat16).item() == 1.0  # torch's own cast rounds twice, through float32
    y = torch.tensor([1 + 2**-4 + 2**-40], dtype=torch.float64)
    assert round_to(y, "e4m3fn").item() == 1.125


def _random_across_range(fmt: FloatFormat, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lo = fmt.emin - fmt.mbits - 2
    hi = min(fmt.emax + 2, 1023)
    e = rng.integers(lo, hi, size=n)
    x = np.ldexp(1 + rng.random(n), e) * rng.choice([-1.0, 1.0], size=n)
    return x


@pytest.mark.parametrize("name", ["tf32", "e8m10", "e11m40", "e10m20", "e8m23", "e6m20"])
def test_wide_formats_random_million(name):
    fmt = get_format(name)
    x = _random_across_range(fmt, 1_000_000, seed=fmt.mbits)
    got = torch_round(x, fmt, "nearest_even", False, torch.float64)
    assert_same_floats(got, gfloat_round(fmt, x, "nearest_even", False), x, name)


def test_fp32_from_float64_matches_correct_cast():
    x = _random_across_range(get_format("fp32"), 1_000_000, seed=7)
    got = round_generic(torch.from_numpy(x), get_format("fp32")).numpy()
    want = x.astype(np.float32).astype(np.float64)  # numpy's double->float cast is correctly rounded
    assert_same_floats(got, want, x, "fp32")


@pytest.mark.parametrize("name", ["bf16", "e4m3fn", "e2m1fn"])
def test_stochastic_rounding_unbiased_and_faithful(name):
    fmt = get_format(name)
    v = finite_values(fmt)
    lo, hi = v[len(v) // 3], v[len(v) // 3 + 1]
    fracs = np.array([0.1, 0.25, 0.5, 0.9])
    draws = 20_000
    x = torch.tensor(np.repeat(lo + fracs * (hi - lo), draws), dtype=torch.float64)
    g = torch.Generator().manual_seed(1234)
    r = round_to(x, fmt, "stochastic", generator=g)
    assert set(np.unique(r.numpy())) <= {lo, hi}
    means = r.view(len(fracs), draws).mean(dim=1).numpy()
    sigma = (hi - lo) * np.sqrt(fracs * (1 - fracs) / draws)
    assert np.all(np.abs(means - (lo + fracs * (hi - lo))) < 5 * sigma)
    again = round_to(x, fmt, "stochastic", generator=torch.Generator().manual_seed(1234))
    assert torch.equal(r, again)


def test_shape_dtype_and_specials_preserved():
    x = torch.tensor([[-0.0, 0.0], [math.inf, -math.inf]], dtype=torch.float32)
    r = round_to(x, "fp16")
    assert r.dtype == torch.float32 and r.shape == (2, 2)
    assert torch.signbit(r[0, 0]) and not torch.signbit(r[0, 1])
    assert r[1, 0].item() == math.inf and r[1, 1].item() == -math.inf
    assert math.isnan(round_to(torch.tensor([math.nan]), "e4m3fn").item())
    assert round_to(torch.tensor([1e6]), "e4m3fn", saturate=True).item() == 448.0
    assert round_to(torch.tensor([1e6]), "e2m1fn").item() == 6.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode="):
        round_to(torch.zeros(1), "bf16", "up")
    with pytest.raises(ValueError, match="x.dtype"):
        round_to(torch.zeros(1, dtype=torch.float16), "bf16")


def test_flush_to_zero_keeps_sign_without_specials_present():
    x = torch.tensor([-1e-40, 1e-40, -3.0], dtype=torch.float32)
    r = round_to(x, "bf16-nosub")
    assert r.tolist() == [0.0, 0.0, -3.0] and torch.signbit(r).tolist() == [True, False, True]


@pytest.mark.parametrize("name", ["bf16", "fp16", "e4m3fn", "e2m1fn", "tf32", "fp32", "e8m30"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_in_place_rounding_matches_round_to(name, dtype):
    from attnum.numerics.rounding import round_to_
    from attnum.numerics.workspace import Workspace

    with np.errstate(over="ignore"):
        x = torch.from_numpy(exhaustive_points(get_format("bf16")).astype(np.float32 if dtype == torch.float32 else np.float64))
    want = round_to(x, name)
    ws = Workspace()
    for _ in range(2):
        got = round_to_(x.clone(), name, ws)
        ok = ~want.isnan()
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got[ok], want[ok]) and torch.equal(got[ok].signbit(), want[ok].signbit())


@pytest.mark.parametrize("fmt", ["bf16", "e4m3fn", "e2m1fn", "fp32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_tensors_round_to_empty(fmt, dtype):
    x = torch.empty(0, 3, dtype=dtype)
    out = round_to(x, fmt)
    assert out.shape == (0, 3) and out.dtype == dtype
