"""The verdict rule: err_target <= k * err_baseline + floor_ulps * ulp(fmt, max|golden|); NaN fails."""

import math

import pytest
import torch

from attnum.audit.verdict import Verdict, judge, ulp
from attnum.formats import get_format

BF16, FP16, FP32 = get_format("bf16"), get_format("fp16"), get_format("fp32")


@pytest.mark.parametrize("fmt", [BF16, FP16, FP32], ids=lambda f: f.name)
def test_ulp_is_eps_at_one_and_scales_by_binade(fmt):
    assert ulp(fmt, 1.0) == fmt.eps
    assert ulp(fmt, 1.5) == fmt.eps
    assert ulp(fmt, 2.0) == 2 * fmt.eps
    assert ulp(fmt, 0.75) == fmt.eps / 2
    assert ulp(fmt, 0.0) == fmt.smallest_subnormal


def test_floor_and_bound_formula():
    g = torch.tensor([1.0, -3.0, 0.5], dtype=torch.float64)
    b = g + torch.tensor([0.0, 0.01, 0.0], dtype=torch.float64)
    v = judge(g, g, b, fmt=BF16, k=2.0, floor_ulps=2.0)
    assert v.status == "pass" and v.target_error == 0.0
    assert v.baseline_error == pytest.approx(0.01)
    assert v.bound == pytest.approx(2 * 0.01 + 2 * BF16.eps * 2.0)  # max|g| = 3 -> binade [2, 4)


def test_error_just_above_bound_fails_and_just_below_passes():
    g = torch.zeros(4, dtype=torch.float64) + 1.0
    b = g + 1e-3
    bound = 2 * 1e-3 + 2 * FP32.eps
    assert judge(g + bound * 0.99, g, b, fmt=FP32, k=2.0, floor_ulps=2.0).status == "pass"
    assert judge(g + bound * 1.01, g, b, fmt=FP32, k=2.0, floor_ulps=2.0).status == "fail"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_where_golden_finite_fails_even_if_baseline_is_worse(bad):
    g = torch.ones(3, dtype=torch.float64)
    t = g.clone()
    t[1] = bad
    v = judge(t, g, g * 100, fmt=FP16, k=2.0, floor_ulps=2.0)
    assert v.status == "fail" and math.isinf(v.target_error) and "golden is finite" in v.note


def test_declared_nan_rows_require_nonfinite_target():
    g = torch.tensor([1.0, math.nan], dtype=torch.float64)
    assert judge(torch.tensor([1.0, math.nan]), g, g, fmt=FP32, k=2, floor_ulps=2).status == "pass"
    v = judge(torch.tensor([1.0, 0.0]), g, g, fmt=FP32, k=2, floor_ulps=2)
    assert v.status == "fail" and "declared NaN" in v.note


def test_shape_mismatch_fails():
    g = torch.zeros(2, 3, dtype=torch.float64)
    assert judge(torch.zeros(3, 2), g, g, fmt=FP32, k=2, floor_ulps=2).status == "fail"


def test_verdict_validates_itself():
    with pytest.raises(ValueError):
        Verdict(status="maybe", target_error=0.0, baseline_error=0.0, bound=0.0)
    with pytest.raises(ValueError):
        judge(torch.zeros(1), torch.zeros(1), torch.zeros(1), fmt=FP32, k=0.0, floor_ulps=2)
