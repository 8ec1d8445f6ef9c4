"""The verdict rule, per element: err <= k * err_baseline + floor_ulps * ulp(fmt, max|golden|) + c(fmt, n) * terms."""

import math

import pytest
import torch

from attnum.audit.verdict import NEAR_BOUND, Verdict, judge, terms_coefficient, ulp
from attnum.numerics.formats import get_format

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


# ---- the size of the terms: an element-wise floor for sums that cancel -------------------------

def test_terms_coefficient_is_one_rounding_in_the_format_plus_sqrt_n_fp32_accumulation():
    u32 = float.fromhex("0x1p-24")
    assert terms_coefficient(FP32, 64) == 9 * u32
    assert terms_coefficient(BF16, 4096) == float.fromhex("0x1p-8") + 64 * u32
    assert terms_coefficient(FP16, 0) == float.fromhex("0x1p-11")
    with pytest.raises(ValueError):
        terms_coefficient(FP32, -1)


def test_cancelling_element_is_judged_by_the_size_of_its_terms():
    # Element 1 is an exact 0 summed from terms of total size 1000; the baseline happens to be exact there.
    g = torch.tensor([1.0, 0.0], dtype=torch.float64)
    b = g + torch.tensor([1e-6, 0.0], dtype=torch.float64)
    terms = torch.tensor([1.0, 1000.0], dtype=torch.float64)
    uniform = 2 * 1e-6 + 2 * FP32.eps
    own = terms_coefficient(FP32, 16) * 1000.0
    for share, status in ((0.99, "pass"), (1.01, "fail")):
        t = g + torch.tensor([0.0, share * (uniform + own)], dtype=torch.float64)
        v = judge(t, g, b, fmt=FP32, k=2.0, floor_ulps=2.0, terms=terms, n_terms=16)
        assert v.status == status
        # the numbers are the binding element's: its error, its bound, the terms' share of it
        assert v.target_error == pytest.approx(share * (uniform + own))
        assert v.bound == pytest.approx(uniform + own) and v.terms_floor == pytest.approx(own)
        assert v.ratio == pytest.approx(share)
    # FA's rule alone fails the same 99% case: the floor is what admits it.
    t = g + torch.tensor([0.0, 0.99 * (uniform + own)], dtype=torch.float64)
    assert judge(t, g, b, fmt=FP32, k=2.0, floor_ulps=2.0).status == "fail"


def test_terms_floor_is_per_element_not_shared():
    # A large term size at element 1 gives element 0 no extra room.
    g = torch.tensor([1.0, 0.0], dtype=torch.float64)
    terms = torch.tensor([1.0, 1e6], dtype=torch.float64)
    uniform = 2 * FP32.eps
    t = g + torch.tensor([uniform + 2 * terms_coefficient(FP32, 4), 0.0], dtype=torch.float64)
    assert judge(t, g, g, fmt=FP32, k=2.0, floor_ulps=2.0, terms=terms, n_terms=4).status == "fail"


def test_terms_never_excuse_nonfinite_output():
    g = torch.zeros(3, dtype=torch.float64)
    t = torch.tensor([0.0, math.nan, 0.0])
    v = judge(t, g, g, fmt=BF16, k=2.0, floor_ulps=2.0, terms=torch.full((3,), 1e30, dtype=torch.float64), n_terms=8)
    assert v.status == "fail" and "NaN" in v.note
    with pytest.raises(ValueError):
        judge(g, g, g, fmt=FP32, k=2.0, floor_ulps=2.0, terms=torch.zeros(4, dtype=torch.float64), n_terms=1)


@pytest.mark.parametrize("status,error,near", [("pass", 0.85, True), ("pass", 0.8, False), ("note", 0.9, False),
                                               ("fail", 1.5, False), ("pass", 0.1, False)])
def test_near_bound_flags_passes_above_80_percent(status, error, near):
    v = Verdict(status=status, target_error=error, baseline_error=0.5, bound=1.0)
    assert v.near_bound is near and NEAR_BOUND == 0.8
