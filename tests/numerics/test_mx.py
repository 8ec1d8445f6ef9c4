"""Block-scaled formats (attnum.numerics.mx): exhaustive on the element grids, against ml_dtypes and a brute-force reference."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format
from attnum.numerics.mx import (
    BLOCK_FORMATS,
    E8M0,
    BlockFormat,
    block_quantize,
    block_quantize_reference,
    element_grid,
    get_block_format,
)

ML = {"e2m1fn": ml_dtypes.float4_e2m1fn, "e2m3fn": ml_dtypes.float6_e2m3fn, "e3m2fn": ml_dtypes.float6_e3m2fn,
      "e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def test_e8m0_every_code_matches_ml_dtypes():
    codes = torch.arange(256)
    ours = E8M0.decode(codes).numpy()
    theirs = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert math.isnan(ours[255]) and ours[0] == 2.0**-127 and ours[254] == 2.0**127
    assert (E8M0.emin, E8M0.emax) == (-127, 127)


@pytest.mark.parametrize("name", sorted(ML))
def test_element_grid_is_every_finite_value(name):
    f = get_format(name)
    bits = 1 + f.ebits + f.mbits
    raw = np.arange(2 ** (bits - 1), dtype=np.uint8)  # every non-negative code
    vals = raw.view(ML[name]).astype(np.float64)
    want = np.unique(vals[np.isfinite(vals)])
    assert np.array_equal(element_grid(f).numpy(), want)


def _probe_values(grid: torch.Tensor) -> torch.Tensor:
    """Every grid value, every midpoint, and the float64 neighbours of every midpoint."""
    mids = (grid[1:] + grid[:-1]) / 2
    up = torch.nextafter(mids, torch.full_like(mids, math.inf))
    down = torch.nextafter(mids, torch.zeros_like(mids))
    return torch.cat([grid, mids, up, down])


@pytest.mark.parametrize("name", ["mxfp4", "mxfp6-e2m3", "mxfp6-e3m2", "mxfp8-e4m3", "mxfp8-e5m2"])
def test_mx_exhaustive_against_reference_and_ml_dtypes(name):
    fmt = get_block_format(name)
    grid = element_grid(fmt.elem)
    probe = _probe_values(grid)
    for k in (-130, -5, 0, 7, 120):  # shared exponents, one clamped at e8m0's bottom
        shared = max(k, E8M0.emin)
        head = torch.full((1,), grid[-1].item())  # amax = elem max * 2**k pins the shared exponent at k
        body = torch.cat([probe, -probe])
        n = -(-(body.numel() + 1) // fmt.block) * fmt.block
        x = torch.cat([head, body, torch.zeros(n - body.numel() - 1, dtype=torch.float64)])
        x = x.reshape(-1, fmt.block)
        x[:, 0] = grid[-1]  # every block's amax is the element max
        x = x * 2.0**k
        q = block_quantize(x, fmt)
        ref = block_quantize_reference(x, fmt)
        assert torch.equal(q.scales, ref.scales) and torch.equal(q.values, ref.values)
        assert bool((q.scales == 2.0**shared).all())
        assert q.clamped == (x.shape[0] if k < E8M0.emin else 0)
        if k >= E8M0.emin:  # the unclamped quotient is the probe itself: ml_dtypes rounds it the same way
            y = (x / 2.0**shared).numpy()
            theirs = y.astype(ML[fmt.elem.name]).astype(np.float64)
            assert np.array_equal(q.values.numpy(), theirs)
        deq = q.dequantize()
        assert torch.equal(block_quantize(deq, fmt).dequantize(), deq)  # dequantized values are fixed points


def test_nvfp4_against_reference_and_error_bound():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=g, dtype=torch.float64) * torch.exp2(torch.randint(-6, 6, (8, 1), generator=g))
    q = block_quantize(x, "nvfp4")
    ref = block_quantize_reference(x, "nvfp4")
    assert torch.equal(q.values, ref.values) and torch.equal(q.scales, ref.scales)
    assert q.tensor_scale.item() == ref.tensor_scale.item()
    e4m3 = element_grid(get_format("e4m3fn"))
    assert bool(torch.isin(q.scales, e4m3).all())
    # each value is within half an e2m1 spacing (at most 1 at the top binade [4, 6]) of x / scale
    s = (q.scales * q.tensor_scale).repeat_interleave(16, dim=-1).reshape(x.shape)
    y = x / s
    assert bool(((q.values - y).abs() <= 0.5 * torch.where(y.abs() >= 4, 2.0, torch.where(y.abs() >= 2, 1.0, 0.5))
                 + 1e-12 * y.abs()).all())


def test_bad_block_and_scale_inputs_name_the_parameter():
    with pytest.raises(AttnumInputError, match=r"^block=32 is not allowed; expected a divisor of the last"):
        block_quantize(torch.ones(2, 48), "mxfp4")
    with pytest.raises(AttnumInputError, match=r"^scale_format='e4m3fn' is not allowed"):
        block_quantize(torch.full((16,), 1e4), BlockFormat(elem="e2m1fn", block=16, scale_format="e4m3fn"))
    with pytest.raises(AttnumInputError, match=r"^scale_format='e8m0' is not allowed"):
        block_quantize(torch.full((32,), 1e300, dtype=torch.float64), "mxfp4")
    with pytest.raises(AttnumInputError, match=r"^block_format='mxfp3' is not allowed"):
        get_block_format("mxfp3")
    assert BLOCK_FORMATS["nvfp4"].bits_per_value == 4.5 and BLOCK_FORMATS["mxfp4"].bits_per_value == 4.25


@pytest.mark.parametrize("mbits", [1, 7, 13])
def test_e8_fast_path_is_the_generic_rounding_bit_for_bit(mbits):
    """round_to's float32 bit path for e8mY (fp22 = e8m13, bf16 = e8m7) against the generic path: random
    values over the whole exponent range, every tie pattern's neighbourhood, subnormals, inf, max, NaN."""
    from attnum.numerics.formats import FloatFormat
    from attnum.numerics.rounding import round_generic, round_to

    g = torch.Generator().manual_seed(mbits)
    f = FloatFormat(ebits=8, mbits=mbits)
    r = torch.randn(50000, generator=g) * torch.exp2(torch.randint(-150, 128, (50000,), generator=g).float())
    bits = torch.randint(0, 2**31 - 1, (50000,), generator=g, dtype=torch.int32)
    tie = (bits & ~((1 << (23 - mbits)) - 1)) | (1 << (22 - mbits))  # exactly halfway
    ties = tie.view(torch.float32)
    near = torch.cat([ties, torch.nextafter(ties, torch.full_like(ties, math.inf)),
                      torch.nextafter(ties, torch.zeros_like(ties))])
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45,
                            2.0**-126, 3 * 2.0**-127])
    x = torch.cat([r, near, -near, special])
    a, b = round_to(x, f), round_generic(x, f)
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    keep = ~torch.isnan(a)
    assert torch.equal(a[keep].view(torch.int32), b[keep].view(torch.int32))
