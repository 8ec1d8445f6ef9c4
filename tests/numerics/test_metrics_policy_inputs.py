"""Metrics against scipy and hand values; policy parsing; seeded inputs."""

import math

import numpy as np
import pytest
import scipy.stats
import torch

from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format
from attnum.numerics.metrics import (
    RELATIVE,
    SIGNED,
    deviation,
    error_ratio,
    magnitude_error,
    signed_error,
    wasserstein_distance,
)
from attnum.numerics.policy import SITES, parse_policy
from attnum.workloads.inputs import InputSpec, make_qkv


@pytest.mark.parametrize("n_a,n_b,weighted", [(1000, 1000, False), (1000, 700, False), (500, 800, True),
                                              (1, 3, False)])
def test_wasserstein_matches_scipy(n_a, n_b, weighted):
    rng = np.random.default_rng(n_a + n_b)
    a, b = rng.normal(size=n_a), rng.standard_t(3, size=n_b) * 2
    wa = rng.random(n_a) if weighted else None
    wb = rng.random(n_b) if weighted else None
    want = scipy.stats.wasserstein_distance(a, b, wa, wb)
    assert wasserstein_distance(torch.from_numpy(a), torch.from_numpy(b), wa, wb) == pytest.approx(want, rel=1e-12)


def test_wasserstein_float32_accumulates_in_float64():
    rng = np.random.default_rng(0)
    a = rng.normal(size=200_000).astype(np.float32)
    b = (a + 1e-3).astype(np.float32)
    want = scipy.stats.wasserstein_distance(a.astype(np.float64), b.astype(np.float64))
    assert wasserstein_distance(a, b) == pytest.approx(want, rel=1e-9)


def test_wasserstein_bad_input():
    with pytest.raises(AttnumInputError, match="a has 0"):
        wasserstein_distance(np.array([]), np.array([1.0]))
    with pytest.raises(AttnumInputError, match="b_weights"):
        wasserstein_distance(np.ones(3), np.ones(2), None, np.array([-1.0, 1.0]))


def test_deviation_hand_values():
    x = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    ref = torch.tensor([1.0, 2.5, 3.0], dtype=torch.float64)
    d = deviation(x, ref, fmt="bf16")
    assert d["max_abs"] == 1.0 and d["mean_abs"] == 0.5
    assert d["rmse"] == pytest.approx(math.sqrt(1.25 / 3))
    assert d["max_rel"] == pytest.approx(1 / 3)
    assert d["rel_l1"] == pytest.approx(1.5 / 6.5)
    assert d["max_ulp"] == 1.0 / 2.0**-6  # ulp of bf16 at 3.0 is 2**-6
    assert error_ratio({"max_abs": 2.0}, {"max_abs": 1.0}) == 2.0
    assert error_ratio({"max_abs": 0.0}, {"max_abs": 0.0}) == 1.0


def test_deviation_signed_and_relative_hand_values():
    # rows: [1, -2] -> [1.5, -1.5] (|x| up, then down); [4, 0] -> [2, 1] (down; ref 0)
    x = torch.tensor([[1.5, -1.5], [2.0, 1.0]], dtype=torch.float64)
    ref = torch.tensor([[1.0, -2.0], [4.0, 0.0]], dtype=torch.float64)
    d = deviation(x, ref)
    assert signed_error(x, ref).tolist() == [[0.5, 0.5], [-2.0, 1.0]]
    assert magnitude_error(x, ref).tolist() == [[0.5, -0.5], [-2.0, 0.0]]
    assert d["mean_signed"] == (0.5 + 0.5 - 2.0 + 1.0) / 4
    assert d["mean_magnitude"] == -2.0 / 4
    assert d["bias"] == (-2.0 / 4) / (4.0 / 4)
    scale = 7.0 / 4  # mean |ref|
    assert d["rel_mean_abs"] == pytest.approx(1.0 / scale, rel=1e-15)
    assert d["rel_max_abs"] == pytest.approx(2.0 / scale, rel=1e-15)
    assert d["rel_rmse"] == pytest.approx(math.sqrt(5.5 / 4) / scale, rel=1e-15)
    assert d["rel_mean_signed"] == 0.0
    # per row: max|e| / mean|ref| = 0.5/1.5 and 2/2; mean|e| / mean|ref| = 0.5/1.5 and 1.5/2
    assert d["row_rel_max_abs"] == pytest.approx(1.0, rel=1e-15)
    assert d["row_rel_mean_abs"] == pytest.approx((0.5 / 1.5 + 1.5 / 2) / 2, rel=1e-15)
    assert set(SIGNED + RELATIVE) <= set(d)


def test_deviation_signed_edges():
    same = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    d = deviation(same, same)
    assert all(d[k] == 0.0 for k in SIGNED + RELATIVE)
    shrink = deviation(0.5 * same, same)
    assert shrink["bias"] == -1.0 and shrink["mean_signed"] == 0.25  # signs cancel; magnitudes all shrink
    assert deviation(2 * same, same)["bias"] == 1.0
    zero_row = deviation(torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.zeros(2, 2))
    assert zero_row["row_rel_max_abs"] == math.inf and zero_row["rel_mean_abs"] == math.inf
    assert deviation(torch.tensor([[0.0]]), torch.zeros(1, 1))["row_rel_mean_abs"] == 0.0
    assert math.isnan(deviation(torch.tensor([[math.nan, 1.0]]), torch.ones(1, 2))["mean_signed"])
    assert set(deviation(torch.zeros(0), torch.zeros(0))) >= set(SIGNED + RELATIVE)


def test_policy_names_and_overrides():
    p = parse_policy("fa2:bf16")
    assert (p.inputs.name, p.scores.name, p.exp.name, p.probs.name, p.acc.name, p.out.name) == (
        "bf16", "fp32", "fp32", "bf16", "fp32", "bf16")
    u = parse_policy("uniform", "e4m3fn")
    assert all(getattr(u, s).name == "e4m3fn" for s in SITES if s != "lse")
    assert u.lse.name == "fp32"  # stored as kernels store it; not part of the forward output
    assert parse_policy("fp32") == parse_policy("uniform:fp32")
    assert parse_policy("fp64").matmul_acc == get_format("fp64")
    o = parse_policy("fa2:bf16,acc=fp16,reduction_chunk=16")
    assert o.acc.name == "fp16" and o.reduction_chunk == 16 and o.matmul_mode == "native"
    assert parse_policy("fa2:bf16,matmul_acc=fp16").matmul_mode == "emulated"
    assert parse_policy("torch-cpu:fp16").normalize == "reciprocal"


@pytest.mark.parametrize("spec,match", [("flashy:bf16", "policy="), ("fa2", "names no format"),
                                        ("fa2:bf16,acc", "override"), ("fa2:bf16,foo=fp16", "override"),
                                        ("fa2:e0m1", "format"), ("fa2:bf16,reduction_chunk=0", "reduction_chunk")])
def test_policy_bad_specs(spec, match):
    with pytest.raises(AttnumInputError, match=match):
        parse_policy(spec)


def test_inputs_seeded_and_distributions():
    spec = InputSpec(heads=4, kv_heads=2, seq_len=64, kv_len=32, head_dim=8, dist="outlier", seed=3)
    q, k, v = make_qkv(spec)
    q2, _, _ = make_qkv(spec)
    assert torch.equal(q, q2) and q.dtype == torch.float64
    assert q.shape == (1, 4, 64, 8) and k.shape == (1, 2, 32, 8)
    big = make_qkv(InputSpec(seq_len=4096, heads=8, head_dim=64, dist="outlier"))[0]
    frac = (big.abs() > 6).double().mean().item()  # N(0,1) alone almost never exceeds 6
    assert 2e-4 < frac < 2e-3
    u = make_qkv(InputSpec(seq_len=4096, dist="uniform"))[0]
    assert u.abs().max() <= math.sqrt(3) and abs(u.var().item() - 1) < 0.02
    with pytest.raises(AttnumInputError, match="dist="):
        InputSpec(dist="cauchy")
    with pytest.raises(AttnumInputError, match="kv_heads=3"):
        InputSpec(heads=8, kv_heads=3)
