"""attention/serving/merge.py: the merge of partial (O, LSE) states.

Exactness: in fp64 a merge of key splits equals unsplit float64 attention to float64 rounding (bound
derived from fp64's unit roundoff and the number of terms); empty merges are exact by enumeration of
cases (bit for bit, signed zeros included), for every method, base and convention.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnum import golden_attention
from attnum.attention.serving.merge import (
    LOG2E,
    METHODS,
    State,
    convert_lse,
    empty_state,
    merge_state,
    merge_states,
    parse_lse_base,
)
from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format
from attnum.numerics.metrics import ulp

pytestmark = pytest.mark.usefixtures("one_thread")  # many tiny ops: one thread is faster

U64 = get_format("fp64").eps / 2
INF = math.inf


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same values, same NaN positions and the same sign bits (so -0.0 != +0.0)."""
    return (a.shape == b.shape and a.dtype == b.dtype and bool((torch.isnan(a) == torch.isnan(b)).all())
            and bool(((a == b) | torch.isnan(a)).all()) and bool((torch.signbit(a) == torch.signbit(b)).all()))


def qkv(S=53, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, 5, 16, generator=g, dtype=torch.float64) * 2
    k = torch.randn(2, 3, S, 16, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, S, 8, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def split_states(q, k, v, cuts, base="e"):
    states = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        o, lse = golden_attention(q, k[:, :, a:b], v[:, :, a:b], return_lse=True)
        states.append(State(o, convert_lse(lse, "e", base)))
    return states


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("base", ["e", 2])
@pytest.mark.parametrize("cuts", [(0, 53), (0, 20, 53), (0, 1, 2, 30, 52, 53), (0, 7, 7, 40, 53)],
                         ids=lambda c: f"splits={len(c) - 1}")
def test_fp64_merge_of_splits_is_unsplit_attention(method, base, cuts):
    q, k, v = qkv()
    want_o, want_lse = golden_attention(q, k, v, return_lse=True)
    want_lse = convert_lse(want_lse, "e", base)
    got = merge_states(split_states(q, k, v, cuts, base), policy="fp64", lse_base=base, method=method)
    # Each golden is a float64 sum of S terms (relative error <= S u) and the merge adds a few roundings
    # per state; the output is a convex combination of V rows, so errors scale with max |V|.
    S, n = k.shape[-2], len(cuts) - 1
    bound_o = 2 * (S + 4 * n) * U64 * float(v.abs().max())
    bound_l = 2 * (S + 4 * n) * U64 * float(want_lse.abs().max())
    err_o, err_l = float((got.o - want_o).abs().max()), float((got.lse - want_lse).abs().max())
    print(f"err_o={err_o:.3g} bound={bound_o:.3g}  err_lse={err_l:.3g} bound={bound_l:.3g}")
    assert got.o.dtype == torch.float64
    assert err_o <= bound_o and err_l <= bound_l


def test_fp32_merge_error_is_on_fp32_scale_and_the_sites_are_live():
    q, k, v = qkv()
    want_o, _ = golden_attention(q, k, v, return_lse=True)
    states = split_states(q, k, v, (0, 10, 30, 53))
    fp32 = merge_states(states, policy="fp32")
    bf16 = merge_states(states, policy="fp32,rescale=bf16")
    scale = float(want_o.abs().max())
    err32, err16 = float((fp32.o - want_o).abs().max()), float((bf16.o - want_o).abs().max())
    print(f"fp32 merge err={err32:.3g}, rescale=bf16 err={err16:.3g}, fp32 ulp={ulp(scale, 'fp32'):.3g}")
    assert fp32.o.dtype == torch.float32
    assert err32 <= 8 * ulp(scale, "fp32")  # loaded, weighted, summed: a few fp32 roundings
    assert err16 > 8 * ulp(scale, "fp32")  # the rescale site changes the result: it is live
    assert err16 <= 3 * 8 * ulp(1.0, "bf16") * float(v.abs().max())


# ---- empty states: exact by enumeration --------------------------------------------------------

def _nonempty_cases(dtype=torch.float64):
    """States whose O includes signed zeros, the smallest subnormal and the largest finite value of
    ``dtype``, at LSEs from very negative to very positive."""
    fi = torch.finfo(dtype)
    o = torch.tensor([[0.0, -0.0, fi.smallest_normal * fi.eps, -1.5, fi.max, 1.0]], dtype=dtype)
    for lse in (0.0, -1e30, 80.0, -745.5, 1e30):
        yield f"lse={lse:g}", State(o.clone(), torch.tensor([lse], dtype=dtype))


def _empty_cases(empty_lse=-INF):
    """Empty states whose O is 0, -0, NaN or inf: an empty state's O must never be read."""
    for fill in (0.0, -0.0, math.nan, INF):
        yield f"o={fill}", State(torch.full((1, 6), fill, dtype=torch.float64),
                                 torch.tensor([empty_lse], dtype=torch.float64))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("base", ["e", 2])
@pytest.mark.parametrize("policy", ["fp64", "fp32"])
def test_empty_merged_with_a_state_gives_that_state_bit_for_bit(method, base, policy):
    checked = 0
    dtype = torch.float64 if policy == "fp64" else torch.float32  # s must be a value of the policy
    for (sl, s), (el, e) in itertools.product(_nonempty_cases(dtype), _empty_cases()):
        for order in ([e, s], [s, e], [e, e, s, e], [e, s, e, e]):
            got = merge_states(order, policy=policy, lse_base=base, method=method)
            assert bits_equal(got.o, s.o) and bits_equal(got.lse, s.lse), (sl, el, len(order), got)
            checked += 1
    assert checked == 5 * 4 * 4


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("base", ["e", 2])
@pytest.mark.parametrize("empty_lse", [-INF, INF, -5e4])
def test_empty_merged_with_empty_is_zero_and_the_empty_lse_never_nan(method, base, empty_lse):
    for n in (1, 2, 3, 5):
        for combo in itertools.product(list(_empty_cases(empty_lse)), repeat=min(n, 2)):
            states = [st for _, st in combo] + [empty_state((1,), 6, dtype=torch.float64, empty_lse=empty_lse)] * (n - 2)
            got = merge_states(states[:n], policy="fp64", lse_base=base, method=method, empty_lse=empty_lse)
            assert bits_equal(got.o, torch.zeros(1, 6, dtype=torch.float64)), (n, combo, got.o)
            assert bits_equal(got.lse, torch.tensor([empty_lse], dtype=torch.float64))


@pytest.mark.parametrize("method", METHODS)
def test_plus_inf_convention_is_declared_not_assumed(method):
    """FA2's +inf empty rows merge exactly under empty_lse=+inf, and poison the default convention."""
    s = State(torch.tensor([[1.0, -2.0]], dtype=torch.float64), torch.tensor([0.25], dtype=torch.float64))
    fa2_empty = State(torch.zeros(1, 2, dtype=torch.float64), torch.tensor([INF], dtype=torch.float64))
    ok = merge_state(fa2_empty, s, policy="fp64", empty_lse=INF, method=method)
    assert bits_equal(ok.o, s.o) and bits_equal(ok.lse, s.lse)
    wrong = merge_state(fa2_empty, s, policy="fp64", method=method)  # +inf read as infinite mass
    assert not bool(torch.isfinite(wrong.o).all()) or not bool(torch.isfinite(wrong.lse).all())


@pytest.mark.parametrize("method", METHODS)
def test_a_finite_sentinel_marks_empty_at_or_below_it_and_only_there(method):
    """FlashInfer's old -5e4: a state at or below the sentinel is empty (its O never read), one just
    above it is live and merges exactly; an all-empty merge writes the sentinel."""
    s = State(torch.tensor([[1.0, -2.0]], dtype=torch.float64), torch.tensor([-49999.0], dtype=torch.float64))
    for below in (-5e4, -6e4, -INF):
        e = State(torch.full((1, 2), math.nan, dtype=torch.float64), torch.tensor([below], dtype=torch.float64))
        got = merge_state(e, s, policy="fp64", lse_base=2, empty_lse=-5e4, method=method)
        assert bits_equal(got.o, s.o) and bits_equal(got.lse, s.lse), (below, got)
    live = State(torch.tensor([[3.0, 0.0]], dtype=torch.float64), torch.tensor([-49999.0], dtype=torch.float64))
    both = merge_state(live, s, policy="fp64", lse_base=2, empty_lse=-5e4, method=method)
    assert torch.allclose(both.o, torch.tensor([[2.0, -1.0]], dtype=torch.float64), rtol=0, atol=1e-12)
    assert float(both.lse) == -49998.0


def test_base_two_merge_is_the_natural_merge_in_other_units():
    q, k, v = qkv(seed=3)
    nat = merge_states(split_states(q, k, v, (0, 9, 53)), policy="fp64")
    two = merge_states(split_states(q, k, v, (0, 9, 53), base=2), policy="fp64", lse_base=2)
    assert float((nat.o - two.o).abs().max()) <= 16 * U64 * float(v.abs().max())
    assert float((nat.lse * LOG2E - two.lse).abs().max()) <= 16 * U64 * float(two.lse.abs().max())
    # A base mismatch is not a rounding error: natural LSEs merged as base 2 weigh the states wrongly.
    mixed = merge_states(split_states(q, k, v, (0, 9, 53)), policy="fp64", lse_base=2)
    assert float((mixed.o - nat.o).abs().max()) > 1e-3


def test_merge_takes_fp32_and_bf16_tensors_straight_in():
    q, k, v = qkv()
    states = [State(o.float(), lse.float()) for o, lse in split_states(q, k, v, (0, 30, 53))]
    a = merge_state(*states)
    assert a.o.dtype == torch.float32 and a.o.shape == (2, 3, 5, 8) and a.lse.shape == (2, 3, 5)
    b = merge_state(*[State(o.bfloat16(), lse) for o, lse in states], policy="fp32,inputs=bf16")
    assert float((a.o - b.o).abs().max()) <= 2 * ulp(float(v.abs().max()), "bf16")


@pytest.mark.parametrize("kw,param", [
    ({"lse_base": 10}, "lse_base=10"), ({"lse_base": "2.718"}, "lse_base='2.718'"),
    ({"empty_lse": 0.0}, "empty_lse=0.0"), ({"empty_lse": -999.0}, "empty_lse=-999.0"),
    ({"method": "tree"}, "method='tree'"),
])
def test_bad_arguments_are_one_line_input_errors(kw, param):
    s = State(torch.zeros(1, 2), torch.zeros(1))
    with pytest.raises(AttnumInputError) as err:
        merge_state(s, s, **kw)
    msg = str(err.value)
    assert param in msg and "expected" in msg and "\n" not in msg


def test_bad_states_are_input_errors():
    s = State(torch.zeros(1, 2), torch.zeros(1))
    for bad in ([], [s, (torch.zeros(1, 3), torch.zeros(1))], [s, (torch.zeros(2, 2), torch.zeros(1))], [s, "x"]):
        with pytest.raises(AttnumInputError):
            merge_states(bad)
    assert parse_lse_base("2") == 2 and parse_lse_base("e") == "e"
