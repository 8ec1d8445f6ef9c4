"""Speculative decoding under finite precision: the exact law, its TV, and each named mechanism.

Oracles: hand-computed exact values (dyadic, so float64 holds them), brute-force enumeration,
Monte-Carlo of the same procedure with real noise (chi-square at a stated false-alarm rate), and
scipy's quadrature for the clamped exponential race.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from scipy import integrate
from scipy.stats import chisquare

from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format
from attnum.sampling import (
    MAX_OUTCOMES,
    NOISE,
    SpecProcedure,
    block_index,
    block_law,
    draw,
    get_noise,
    greedy_ties,
    greedy_verify,
    prob_tolerance,
    race_law,
    simulate,
    spec_law,
    spec_tv,
)
from attnum.spec_audit.cases import CASES

P = SpecProcedure
ALPHA = 1e-6  # false-alarm rate of every Monte-Carlo comparison below


def _logits(seed: int, k: int, V: int, draft_noise: float = 0.7):
    g = torch.Generator().manual_seed(seed)
    t = 2.0 * torch.randn(k + 1, V, generator=g, dtype=torch.float64)
    return t, t[:k] + draft_noise * torch.randn(k, V, generator=g, dtype=torch.float64)


def _assert_matches_law(counts: torch.Tensor, probs: torch.Tensor, label: str) -> None:
    """Chi-square of observed counts against exact probabilities; cells of probability 0 must be empty."""
    n = int(counts.sum())
    zero = probs == 0
    assert int(counts[zero].sum()) == 0, f"{label}: {int(counts[zero].sum())} draws in zero-probability cells"
    keep = probs * n >= 5
    obs = torch.cat([counts[keep], counts[~keep & ~zero].sum(0, keepdim=True)]).double()
    exp = torch.cat([probs[keep], probs[~keep & ~zero].sum(0, keepdim=True)]) * n
    obs, exp = obs[exp > 0], exp[exp > 0]
    p = chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()).pvalue
    assert p > ALPHA, f"{label}: chi-square p = {p:.3g} < {ALPHA}"


# ---- the exact law and its TV -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["dirichlet", "peaked", "q-zero"])
def test_fp64_law_is_exact_to_rounding(name):
    """On float64 probabilities every law entry is a sum/product of non-negative terms with at most
    4V + 10 roundings (normalise: V + 1, ratio: 1, 1 - a and the rejection sum: V + 3, residual,
    its tree sum and division: log2 V + 2, its normalisation: V + 1), so TV <= (k+1) gamma_{4V+10}."""
    case = CASES[name]
    r = spec_tv(case.p, case.q, kind="probs", procedure=P(format="fp64"))
    n = 4 * case.V + 10
    u = 2.0**-53
    bound = (case.k + 1) * n * u / (1 - n * u)
    print(f"{name}: tv={r.tv:.3e} plain={r.tv_plain:.3e} bound={bound:.3e}")
    assert r.tv <= bound and r.tv_plain <= bound and r.fail == 0


def test_tv_shrinks_with_mantissa_bits():
    t, d = _logits(0, k=2, V=16)
    tv = {f: spec_tv(t, d, procedure=P(format=f)).tv for f in ("e4m3fn", "bf16", "fp16", "fp32", "fp64")}
    print(tv)
    assert tv["e4m3fn"] > tv["bf16"] > tv["fp16"] > tv["fp32"] > tv["fp64"]
    assert tv["fp32"] < 64 * 2.0**-24  # a handful of fp32 roundings, nothing systematic


def _brute_tv(law, k: int, V: int) -> float:
    """Independent enumeration of the completed block: sum over the stopping position."""
    A, E, B, T = law.accept, law.reject, law.bonus, law.target
    total = 0.0
    for t in itertools.product(range(V), repeat=k + 1):
        target = math.prod(T[j, t[j]].item() for j in range(k + 1))
        got = 0.0
        for s in range(k + 1):
            head = math.prod(A[j, t[j]].item() for j in range(s))
            stop = E[s, t[s]].item() if s < k else B[t[s]].item()
            got += head * stop * math.prod(T[j, t[j]].item() for j in range(s + 1, k + 1))
        total += abs(got - target)
    alive = law.alive()
    return 0.5 * (total + float((alive[:k] * law.fail).sum()))


@pytest.mark.parametrize("proc", [
    P(format="bf16"),
    P(format="e4m3fn", noise="race:0.2:3", uniform_bits=3, zero_residual="first"),
    P(format="e2m1fn", zero_residual="fail"),
], ids=["bf16", "e4m3fn-race-u3", "e2m1fn-fail"])
def test_tv_enumeration_matches_brute_force(proc):
    t, d = _logits(1, k=2, V=3)
    law = spec_law(t, d, procedure=proc)
    got, want = spec_tv(t, d, procedure=proc).tv, _brute_tv(law, 2, 3)
    assert abs(got - want) <= 64 * 2.0**-53, (got, want)


@pytest.mark.parametrize("proc", [
    P(format="e4m3fn", noise="race:0.2:3", uniform_bits=3, zero_residual="first", draft_format="fp64"),
    P(format="e2m1fn", zero_residual="target", q_zero="accept"),
    P(format="bf16", noise="race:0.5"),
], ids=["e4m3fn-race-u3-mismatch", "e2m1fn-target", "bf16-race"])
def test_law_matches_monte_carlo_of_the_procedure(proc, one_thread):
    """simulate() runs the procedure with real clamped noise and real grid uniforms."""
    t, d = _logits(2, k=2, V=4, draft_noise=1.5)
    law = spec_law(t, d, procedure=proc)
    blocks = simulate(t, d, 200_000, procedure=proc, generator=torch.Generator().manual_seed(3))
    assert not bool((blocks == -2).any())
    counts = torch.bincount(block_index(blocks, 4), minlength=4 + 16 + 64)
    _assert_matches_law(counts, block_law(law), str(proc))


# ---- the named mechanisms --------------------------------------------------------------------

def test_draft_underflow_q_zero_where_p_positive():
    """q = 2**-12 underflows to 0 in e4m3fn: the draft (sampling in fp64) still proposes it, the
    verifier sees q^ = 0 and rejects; the residual then adds p(x) again. First-token TV = 2**-13."""
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    q = torch.tensor([2.0**-12, 1 - 2.0**-12], dtype=torch.float64)
    consistent = spec_tv(p, q, k=1, kind="probs", procedure=P(format="e4m3fn"))
    assert consistent.tv == 0.0  # drafts drawn from the same q^: the zero is never proposed
    for rule in ("reject", "accept"):
        r = spec_tv(p, q, k=1, kind="probs", procedure=P(format="e4m3fn", draft_format="fp64", q_zero=rule))
        assert r.tv_first == 2.0**-13 and r.tv == 2.0**-13, (rule, r)


@pytest.mark.parametrize("rule,tv,on_zero_token", [("fail", 2.0**-24, 0.0), ("first", 2.0**-24, 2.0**-24),
                                                  ("target", 0.0, 0.0)])
def test_zero_residual_p_equals_q(rule, tv, on_zero_token):
    """p^ <= q^ everywhere but p^ sums to 1 - 2**-24: a rejection (mass 2**-24) finds an all-zero
    residual (0/0). ``first`` (vLLM's race over zeros) emits token 0, whose target probability is 0."""
    q = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    p = torch.tensor([0.0, 0.5 - 2.0**-24, 0.5], dtype=torch.float64)
    proc = P(format="fp32", zero_residual=rule)
    law = spec_law(p, q, k=1, kind="probs", procedure=proc)
    r = spec_tv(p, q, k=1, kind="probs", procedure=proc)
    assert abs(r.tv_first - tv) <= 4 * 2.0**-53 and abs(r.tv - tv) <= 4 * 2.0**-53, r
    assert r.fail == (2.0**-24 if rule == "fail" else 0.0)
    assert (law.accept[0] + law.reject[0])[0].item() == on_zero_token


def test_uniform_grid_accepts_a_zero_probability_token():
    """torch.rand's fp32 grid includes 0 and vLLM/HF accept when u <= ratio: a drafted token with
    p = 0 is accepted with probability 2**-24."""
    p = torch.tensor([1.0, 0.0], dtype=torch.float64)
    q = torch.tensor([0.5, 0.5], dtype=torch.float64)
    law = spec_law(p, q, k=1, kind="probs", procedure=P(format="fp32", uniform_bits=24))
    assert law.accept[0, 1].item() == 0.5 * 2.0**-24
    assert spec_law(p, q, k=1, kind="probs", procedure=P(format="fp32")).accept[0, 1].item() == 0.0


def _tail_race(n_tail=262144, gap=20.5):
    return torch.cat([torch.ones(1, dtype=torch.float64), torch.full((n_tail,), math.exp(-gap), dtype=torch.float64)])


def test_exponential_noise_floor_vllm_pr_43150():
    """1 head token and 262,144 tail tokens at logit gap 20.5: the tail should win 3.28e-4 of the
    time (32.76 in 100k trials); with fp32 noise floored at 2**-24 it wins at most
    exp(-2**-24 e^20.5) ~ 2e-21 (its best score is below the head's unless E_head > 2**-24 e^20.5)."""
    w = _tail_race()
    exact = race_law(w, NOISE["exact"])[1:].sum().item()
    tail_mass = 262144 * math.exp(-20.5) / (1 + 262144 * math.exp(-20.5))
    assert abs(exact - tail_mass) <= 1e-15
    floored = race_law(w, NOISE["exp-fp32"])[1:].sum().item()
    assert floored <= math.exp(-(2.0**-24) * math.exp(20.5))
    assert race_law(w, NOISE["exp-fp64"])[1:].sum().item() == pytest.approx(tail_mass, rel=1e-9)


def _head_win_quadrature(w_t: float, m: int, floor: float, cap: float) -> float:
    """P(head of weight 1 beats m tails of weight w_t) by quadrature over the head's noise."""
    def tails_below(e):  # P(every tail score < 1 / e)
        x = w_t * e  # a tail's noise must exceed this
        return 1.0 if x < floor else (0.0 if x >= cap else math.exp(-m * x))
    cont, _ = integrate.quad(lambda e: math.exp(-e) * tails_below(e), floor, min(cap, 60.0),
                             points=[floor / w_t] if floor < floor / w_t < cap else None, limit=200,
                             epsabs=1e-14, epsrel=1e-12)
    return -math.expm1(-floor) * tails_below(floor) + cont + math.exp(-cap) * tails_below(cap)


@pytest.mark.parametrize("noise", ["gumbel-tlrand", "race:1e-9", "race:1e-9:30"])
def test_gumbel_noise_cap_vllm_pr_47524(noise):
    """tl.rand's 2**-31 resolution caps the Gumbel noise at ~21.5: on the same tail race the tail
    keeps only part of its mass. The closed form against quadrature."""
    nz = get_noise(noise)
    law = race_law(_tail_race(), nz)
    want = _head_win_quadrature(math.exp(-20.5), 262144, nz.floor, nz.cap)
    print(noise, "tail mass", law[1:].sum().item(), "head", law[0].item(), "quadrature", want)
    assert abs(law[0].item() - want) <= 1e-10
    assert abs(law.sum().item() - 1) <= 1e-12


@pytest.mark.parametrize("noise", ["race:0.3", "race:0.3:2", "race:0.05:0.6", "race:0.5:0.8"])
def test_race_law_matches_clamped_noise(noise, one_thread):
    """Groups of equal weights, both clamps, ties at the floor (first index wins, as argmax)."""
    w = torch.tensor([0.3, 0.3, 0.3, 0.05, 0.2, 0.05, 0.0, 0.1], dtype=torch.float64)
    nz = get_noise(noise)
    law = race_law(w, nz)
    draws = draw(w, 400_000, nz, torch.Generator().manual_seed(7))
    _assert_matches_law(torch.bincount(draws, minlength=w.numel()), law, noise)


def test_greedy_tie_vllm_issue_7627():
    """Two exactly equal top logits: plain greedy takes the first, speculative greedy (rank by >=)
    accepts the draft's pick, the second. A float64 gap below half a bf16 ulp becomes a tie in bf16."""
    assert greedy_verify(torch.tensor([1.0, 3.0, 3.0, 0.5]), 2, "fp32") == (1, 2)
    near = torch.tensor([1.0, 3.0, 3.0 + 2.0**-9, 0.5], dtype=torch.float64)
    assert greedy_verify(near, 2, "fp64") == (2, 2)
    assert greedy_verify(near, 2, "bf16") == (1, 2)
    g = torch.Generator().manual_seed(0)
    x = 3.0 * torch.randn(400, 8000, generator=g, dtype=torch.float64)
    rates = {f: greedy_ties(x, f)["tie_rate"] for f in ("fp64", "fp32", "bf16")}
    assert rates["fp64"] == 0.0 and rates["bf16"] > rates["fp32"], rates


# ---- bad input ----------------------------------------------------------------------------------

def test_bad_input_is_one_line():
    t, d = _logits(0, k=1, V=8)
    with pytest.raises(AttnumInputError, match="k=0"):
        spec_law(t[0], d[0], k=0)
    big_V = round(MAX_OUTCOMES ** (1 / 5)) + 2
    with pytest.raises(AttnumInputError, match="Monte-Carlo"):
        spec_tv(torch.zeros(big_V), torch.zeros(big_V), k=4)
    p = torch.tensor([0.6, 0.5, -0.1], dtype=torch.float64)
    with pytest.raises(AttnumInputError, match=">= 0"):
        spec_law(p, torch.ones(3) / 3, k=1, kind="probs")
    tol = prob_tolerance(get_format("fp32"), 3)
    off = torch.tensor([0.5, 0.25, 0.25 + 2 * tol], dtype=torch.float64)
    with pytest.raises(AttnumInputError, match="tolerance") as err:
        spec_law(off, torch.ones(3) / 3, k=1, kind="probs", procedure=P(format="fp32"))
    assert "\n" not in str(err.value)
    spec_law(off, torch.ones(3) / 3, k=1, kind="probs", procedure=P(format="bf16"))  # within bf16's
    with pytest.raises(AttnumInputError, match="NaN"):
        spec_law(torch.tensor([0.0, math.nan]), torch.zeros(2), k=1)
    with pytest.raises(AttnumInputError):
        P(noise="gauss")
    with pytest.raises(AttnumInputError):
        block_index(torch.tensor([[0, 8, -1]]), 8)


def test_cli_spec(capsys):
    from attnum.cli import main

    assert main(["spec", "--vocab", "8", "--k", "1,2", "--format", "fp32,bf16"]) == 0
    out = capsys.readouterr().out
    assert "bf16" in out and "tv_plain" in out
    assert main(["spec", "--vocab", "64", "--k", "4"]) == 2
    assert "--monte-carlo" in capsys.readouterr().err
    assert main(["spec", "--vocab", "64", "--k", "4", "--monte-carlo", "2000", "--format", "e4m3fn"]) == 0
    assert "mc_floor" in capsys.readouterr().out
    assert main(["spec", "--k", "0"]) == 2
