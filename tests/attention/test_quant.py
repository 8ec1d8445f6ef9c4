"""Quantization (FP8, int8, scales, KV cache), the Hadamard rotation and FP8 attention.

Oracles: gfloat for FP8 rounding, Python's round (ties to even) for int8, float64 error bounds
derived from the format, and bit-identity with the core's flash/baseline where the algebra says so.
"""

import math

import numpy as np
import pytest
import torch
from _oracle import gfloat_round

from attnum import baseline_attention, flash_attention, get_format, round_to
from attnum.attention.lowbit.quant import (
    FA3_P_SCALE,
    Quantization,
    fp8_attention,
    fp8_baseline_attention,
    fp8_policy,
    kv_cache_quantization,
    parse_scale,
    quantize,
    quantize_kv_cache,
    random_hadamard,
    rotate,
)
from attnum.errors import AttnumInputError
from attnum.numerics.metrics import ulp

U64 = 2.0**-53


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


# ---- quantize -------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
@pytest.mark.parametrize("saturate", [False, True])
def test_fixed_scale_matches_gfloat_and_counts_overflow(fmt, saturate):
    f = get_format(fmt)
    s = 0.5  # a power of two: x / s is exact, so the values are gfloat's rounding of 2x
    x = randn(2, 3, 40, 16) * f.max / 6
    x[0, 0, 0, :4] = torch.tensor([f.max / 2, (f.max + ulp(f.max, f) / 2) / 2, 3 * f.max, -3 * f.max])
    qt = quantize(x, Quantization(fmt=fmt, scale=s, saturate=saturate))
    y = (x / s).numpy().ravel()
    want = gfloat_round(f, y, "nearest_even", saturate)
    got = qt.values.numpy().ravel()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
    unsat = gfloat_round(f, y, "nearest_even", False)
    assert qt.overflow == int((~np.isfinite(unsat)).sum()) > 0
    assert qt.scales.shape == (1, 1, 1, 1) and qt.scales.item() == s


def test_fp8_overflow_threshold_is_the_format_midpoint():
    """e4m3fn: 464 = 448 + ulp/2 is a tie and rounds to the even 448; just above it overflows."""
    x = torch.tensor([447.0, 448.0, 464.0, 464.0 + 2**-40, 1e4, -1e4], dtype=torch.float64).reshape(1, 1, 6, 1)
    qt = quantize(x, Quantization(fmt="e4m3fn", scale=1.0))
    assert qt.overflow == 3
    assert qt.values.ravel()[:3].tolist() == [448.0, 448.0, 448.0] and torch.isnan(qt.values.ravel()[3:]).all()
    sat = quantize(x, Quantization(fmt="e4m3fn", scale=1.0, saturate=True))
    assert sat.overflow == 3 and sat.values.ravel()[3:].tolist() == [448.0, 448.0, -448.0]


def test_int8_rounds_to_nearest_even_and_clamps_exhaustively():
    ks = np.arange(-131, 132, dtype=np.float64)
    y = np.concatenate([ks, ks + 0.5, ks + 0.5 - 2**-40, ks + 0.5 + 2**-40, ks + 0.25, [0.3, -0.3, 1e-300]])
    x = torch.from_numpy(y).reshape(1, 1, -1, 1)
    qt = quantize(x, Quantization(fmt="int8", scale=1.0))
    rounded = np.array([round(t) for t in y], dtype=np.float64)  # Python rounds ties to even
    np.testing.assert_array_equal(qt.values.numpy().ravel(), np.clip(rounded, -127, 127))
    assert qt.overflow == int((np.abs(rounded) > 127).sum())


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "int8"])
@pytest.mark.parametrize("granularity,shape", [("tensor", (1, 1, 1, 1)), ("head", (2, 3, 1, 1)),
                                               ("block", (2, 3, 3, 1)), ("token", (2, 3, 300, 1))])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_calibrated_scales_put_each_granule_max_on_the_format_max(fmt, granularity, shape, dtype):
    x = randn(2, 3, 300, 8, seed=1, dtype=dtype) * torch.linspace(0.01, 50, 300, dtype=dtype)[:, None]
    qt = quantize(x, Quantization(fmt=fmt, granularity=granularity, block=128))
    fmax = 127.0 if fmt == "int8" else get_format(fmt).max
    assert qt.scales.shape == shape and qt.overflow == 0
    assert torch.equal(round_to(qt.scales, "fp32"), qt.scales)  # scales are fp32 values
    vmax = qt.values.abs().amax(dim=-1, keepdim=True)  # per token
    if granularity in ("tensor", "head"):
        vmax = vmax.amax(dim=(-2,) if granularity == "head" else (0, 1, 2), keepdim=True)
    elif granularity == "block":
        vmax = torch.stack([vmax[:, :, i:i + 128].amax(dim=-2) for i in range(0, 300, 128)], dim=-2)
    assert torch.all(vmax == fmax)
    # dequantized within half a grid step of each value (times its scale)
    xs = x.double() / qt.token_scales()
    half = 0.5 if fmt == "int8" else ulp(xs, fmt) / 2
    err = (qt.dequantize() - x.double()).abs()
    assert torch.all(err <= half * qt.token_scales() * (1 + 2 * U64)), err.max()


def test_dequantize_to_a_compute_format_rounds_once():
    qt = quantize(randn(1, 2, 33, 8, seed=2) * 3, Quantization(fmt="e4m3fn", granularity="token"))
    exact = qt.values * qt.scales
    assert torch.equal(qt.dequantize(), exact)
    assert torch.equal(qt.dequantize("bf16"), round_to(exact, "bf16"))
    assert qt.nbytes == 2 * 33 * 8 + 4 * 2 * 33


def test_kv_cache_quantization_and_fixed_scale_overflow():
    k = randn(1, 2, 50, 16, seed=3) * 100  # |k| up to ~400: e5m2 holds it at scale 1, int8 does not
    v = randn(1, 2, 50, 16, seed=4)
    cache = quantize_kv_cache(k, v, Quantization(fmt="int8", scale=1.0))
    assert cache.k.overflow == int((k.abs() >= 127.5).sum()) > 0 and cache.v.overflow == 0
    assert cache.overflow == cache.k.overflow
    kd, vd = cache.dequantize("bf16")
    assert torch.equal(kd, round_to(cache.k.values, "bf16")) and torch.equal(vd, round_to(cache.v.values, "bf16"))
    c2 = quantize_kv_cache(k, v, Quantization(fmt="fp8_e5m2", scale=1.0), Quantization(fmt="e4m3fn"))
    assert c2.k.config.fmt == "e5m2" and c2.v.config.fmt == "e4m3fn" and c2.overflow == 0
    assert c2.nbytes == 2 * (2 * 50 * 16) + 4 * 2


def test_kv_cache_dtype_flags():
    assert kv_cache_quantization("auto") is None and kv_cache_quantization("bf16", 1.0) is None
    q = kv_cache_quantization("fp8", "1.0", granularity="head")
    assert (q.fmt, q.scale, q.granularity) == ("e4m3fn", 1.0, "head")
    assert kv_cache_quantization("fp8_e5m2").fmt == "e5m2" and kv_cache_quantization("int8").calibrated
    with pytest.raises(AttnumInputError, match="kv_cache_dtype="):
        kv_cache_quantization("fp4")
    with pytest.raises(AttnumInputError, match="scale="):
        kv_cache_quantization("fp8", 0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(fmt="int4"), "fmt="), (dict(granularity="row"), "granularity="), (dict(scale=0.0), "scale="),
    (dict(scale=float("inf")), "scale="), (dict(scale="big"), "scale="), (dict(block=0), "block="),
])
def test_bad_quantization_config(kwargs, match):
    with pytest.raises(AttnumInputError, match=match):
        Quantization(**kwargs)


def test_scale_parsing_and_nonfinite_calibration():
    assert parse_scale("calibrated") == "calibrated" and parse_scale("1.0") == 1.0
    with pytest.raises(AttnumInputError, match="scale="):
        parse_scale("-2")
    x = torch.tensor([1.0, math.inf]).reshape(1, 1, 2, 1)
    with pytest.raises(AttnumInputError, match="finite"):
        quantize(x, Quantization())
    assert quantize(torch.zeros(1, 1, 2, 2), Quantization()).scales.item() == 1.0  # all-zero granule
    empty = quantize(torch.zeros(2, 3, 0, 4), Quantization(granularity="block"))
    assert empty.values.shape == (2, 3, 0, 4) and empty.scales.shape == (2, 3, 0, 1) and empty.overflow == 0
    q = randn(1, 2, 3, 8)
    out = fp8_attention(q, q[:, :, :0], q[:, :, :0])  # no keys: every row is empty and gives 0
    assert out.shape == (1, 2, 3, 8) and torch.all(out == 0)


# ---- incoherent processing -----------------------------------------------------------------

@pytest.mark.parametrize("d", [1, 2, 8, 64, 128])
def test_hadamard_is_orthogonal_and_preserves_qk(d):
    r = random_hadamard(d, seed=5)
    gamma = lambda n: n * U64 / (1 - n * U64)  # Higham's gamma_n
    assert (r @ r.T - torch.eye(d, dtype=torch.float64)).abs().max() <= gamma(d + 2)
    q, k = randn(1, 2, 9, d, seed=6) * 5, randn(1, 2, 11, d, seed=7)
    got = rotate(q, r) @ rotate(k, r).transpose(-1, -2)
    want = q @ k.transpose(-1, -2)
    ar = r.abs()
    # errors of Q R, K R, their product (each a d-term dot product), R R^T != I and Q K^T itself
    bound = gamma(3 * d + 4) * ((q.abs() @ ar) @ (k.abs() @ ar).transpose(-1, -2) + q.abs() @ k.abs().transpose(-1, -2))
    assert torch.all((got - want).abs() <= bound)
    if d > 1:  # the bound sees a K rotated by another R (one sign flipped)
        other = rotate(k, r * torch.tensor([-1.0] + [1.0] * (d - 1), dtype=torch.float64)[:, None])
        assert not torch.all((rotate(q, r) @ other.transpose(-1, -2) - want).abs() <= bound)


def test_hadamard_needs_a_power_of_two():
    with pytest.raises(AttnumInputError, match="head_dim=96"):
        random_hadamard(96)


# ---- FP8 attention ---------------------------------------------------------------------------

def pow2_blocks(B, G, S, d, block, seed):
    """Values in (-2.5, 2.5) with one entry per (b, g, block) set to 7, 3.5 or 14: every calibrated
    scale (amax / 448) is then a power of two, so descaling commutes with every fp32 rounding."""
    x = randn(B, G, S, d, seed=seed) * 0.5
    x = x.clamp(-2.4, 2.4)
    for i, j0 in enumerate(range(0, S, block)):
        x[:, :, j0, 0] = (7.0, 3.5, 14.0)[i % 3] * (-1) ** i
    return x


@pytest.mark.parametrize("granularity", ["tensor", "head", "block"])
@pytest.mark.parametrize("case", [dict(N=70, S=200, H=4, G=2, causal=True), dict(N=1, S=129, H=2, G=2, causal=False)])
def test_fp8_attention_equals_flash_on_dequantized_inputs(granularity, case):
    """With power-of-two scales, FA3's descaling of fp32 scores and of the P V products gives the
    same bits as the core's flash attention run on the dequantized tensors under the same policy."""
    N, S, H, G, block, d = case["N"], case["S"], case["H"], case["G"], 64, 16
    q, k, v = pow2_blocks(1, H, N, d, block, 10), pow2_blocks(1, G, S, d, block, 11), pow2_blocks(1, G, S, d, block, 12)
    cfg = Quantization(granularity=granularity, block=block)
    qd, kd, vd = (quantize(t, cfg).dequantize().float() for t in (q, k, v))
    want = flash_attention(qd, kd, vd, is_causal=case["causal"], causal_alignment="bottom_right",
                           policy=fp8_policy("e4m3fn", "bf16").with_overrides(inputs="fp32", out="bf16"), block_k=block)
    got = fp8_attention(q, k, v, is_causal=case["causal"], causal_alignment="bottom_right", granularity=granularity,
                        block=block, incoherent=False, p_scale=1.0)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    assert torch.equal(got, round_to(got, "bf16"))


def test_fp8_baseline_equals_baseline_on_dequantized_inputs():
    q, k, v = (pow2_blocks(1, 2, 90, 16, 90, s) for s in (13, 14, 15))
    cfg = Quantization()
    qd, kd, vd = (quantize(t, cfg).dequantize().float() for t in (q, k, v))
    want = baseline_attention(qd, kd, vd, policy=fp8_policy("e4m3fn", "bf16", "fp16").with_overrides(inputs="fp32", out="bf16"))
    got = fp8_baseline_attention(q, k, v, softmax="fp16")
    assert torch.equal(got, want)


def test_incoherent_processing_rotates_q_and_k_only():
    q, k, v = randn(1, 2, 40, 32, seed=16), randn(1, 2, 50, 32, seed=17), randn(1, 2, 50, 32, seed=18)
    r = random_hadamard(32, seed=3)
    got = fp8_attention(q, k, v, incoherent=True, seed=3, block=16)
    assert torch.equal(got, fp8_attention(rotate(q, r), rotate(k, r), v, incoherent=False, block=16))
    got_b = fp8_baseline_attention(q, k, v, incoherent=True, seed=3)
    assert torch.equal(got_b, fp8_baseline_attention(rotate(q, r), rotate(k, r), v))


def test_p_scale_keeps_small_probabilities_out_of_fp8_underflow():
    """Two keys with logits 0 and -10: P = e^-10 = 4.5e-5 is below half of e4m3's smallest
    subnormal (2**-10) and flushes to 0 unless scaled by 256 first (then 1.2e-2, a normal)."""
    d = 16
    q = torch.zeros(1, 1, 1, d, dtype=torch.float64)
    q[..., 0] = 8.0
    k = torch.zeros(1, 1, 2, d, dtype=torch.float64)
    k[0, 0, 1, 0] = -5.0  # s = (8 * -5) / sqrt(16) = -10
    v = torch.ones(1, 1, 2, d, dtype=torch.float64)
    for p_scale, lost in ((1.0, 1), (FA3_P_SCALE, 0)):
        out, stats = fp8_attention(q, k, v, incoherent=False, p_scale=p_scale, return_stats=True)
        assert stats["p_underflow"] == lost and stats["p_nonzero"] == 2
        assert stats["overflow"] == {"q": 0, "k": 0, "v": 0}
        want = 1.0 / (1.0 + math.exp(-10.0)) if lost else 1.0  # the lost key's weight is missing
        assert abs(out[0, 0, 0, 0].item() - want) <= 2**-8


@pytest.mark.parametrize("kwargs,match", [
    (dict(granularity="token"), "granularity="), (dict(fmt="int8"), "fmt="), (dict(p_scale=0.0), "p_scale="),
    (dict(kv_order="sideways"), "kv_order="),
])
def test_fp8_attention_bad_input(kwargs, match):
    q = randn(1, 1, 4, 8)
    with pytest.raises(AttnumInputError, match=match):
        fp8_attention(q, q, q, **kwargs)
