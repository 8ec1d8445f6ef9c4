"""The speculative-sampler auditor: correct samplers pass at the stated false-alarm rate, planted bugs
fail, out-of-range tokens are one line (exit 2), and the statistics agree with scipy."""

from __future__ import annotations

import math

import _paths
import pytest
import torch
from scipy import stats as sps

from attnum.errors import AttnumInputError
from attnum.spec_audit import SpecAuditConfig, run_spec_audit
from attnum.spec_audit import stats as st

EXAMPLES = _paths.EXAMPLES / "spec_samplers"
BUGS = ["resample_from_p", "no_min_cumulative", "bonus_off_by_one", "residual_abs", "ratio_inverted"]


def _target(name: str) -> str:
    return f"{EXAMPLES / name}.py:sampler"


def test_statistics_agree_with_scipy():
    for df in (1, 7, 80, 300):
        x = sps.chi2.isf(1e-3, df)
        assert abs(st.chi2_sf(x, df) - 1e-3) <= 1e-9
        assert abs(st.chi2_isf(1e-3, df) - x) <= 1e-6 * x
        for lam in (0.5, 30.0, 400.0):
            assert abs(st.ncx2_sf(x, df, lam) - sps.ncx2.sf(x, df, lam)) <= 1e-9
        lam = st.lambda_needed(df, 1e-3, 0.99)
        assert abs(sps.ncx2.sf(x, df, lam) - 0.99) <= 1e-6


def test_reference_passes_with_power_analysis_sample_sizes(one_thread):
    """Default: every case sized to detect TV 0.01 with power 0.99 at family-wise alpha 1e-3."""
    r = run_spec_audit(SpecAuditConfig(target="attnum", seed=1))
    assert r["verdict"] == "pass", r
    for row in r["cases"]:
        assert row["detectable_tv"] <= 0.01 + 1e-12 and row["alpha"] == pytest.approx(1e-3 / 7)


def test_false_alarm_rate_is_as_stated(one_thread):
    """200 independent audits of the correct sampler at alpha = 0.05 on one case: the number that
    fail is Binomial(200, <= 0.05); more than its 1 - 1e-6 quantile means the stated rate is wrong."""
    fails = 0
    for seed in range(200):
        r = run_spec_audit(SpecAuditConfig(target="attnum", cases=("near-equal",), samples=2000, alpha=0.05,
                                           seed=seed))
        fails += r["verdict"] == "fail"
    hi = sps.binom.ppf(1 - 1e-6, 200, 0.05)
    print(f"{fails} of 200 audits failed at alpha 0.05 (bound {hi})")
    assert fails <= hi


def test_correct_alternative_passes(one_thread):
    r = run_spec_audit(SpecAuditConfig(target=_target("cumulative_uniform"), samples=40_000))
    assert r["verdict"] == "pass", r


@pytest.mark.parametrize("bug", BUGS)
def test_planted_bugs_fail(bug, one_thread):
    """20,000 samples per case detect TV ~ 0.07 with power 0.99; each bug is far beyond on some case."""
    r = run_spec_audit(SpecAuditConfig(target=_target(bug), samples=20_000))
    failed = [c["case"] for c in r["cases"] if c["verdict"] == "fail"]
    print(bug, failed)
    assert r["verdict"] == "fail" and failed


def test_hf_transformers_passes(one_thread):
    pytest.importorskip("transformers")
    r = run_spec_audit(SpecAuditConfig(target="hf-transformers", samples=1500))
    print([(c["case"], round(c["p_value"], 3), round(c["detectable_tv"], 3)) for c in r["cases"]])
    assert r["verdict"] == "pass", r


def test_out_of_range_tokens_are_one_line_exit_2(capsys):
    from attnum.cli import main

    with pytest.raises(AttnumInputError, match="0..5"):
        run_spec_audit(SpecAuditConfig(target=_target("out_of_range"), samples=20_000))
    assert main(["spec-audit", _target("out_of_range"), "--samples", "20000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sampler output row" in err


def test_cli_exit_status(capsys):
    from attnum.cli import main

    assert main(["spec-audit", "attnum", "--samples", "3000", "--cases", "dirichlet,disjoint"]) == 0
    assert "pass" in capsys.readouterr().out
    assert main(["spec-audit", _target("resample_from_p"), "--samples", "20000", "--cases", "dirichlet"]) == 1
    assert main(["spec-audit", "attnum", "--cases", "nope"]) == 2
    assert main(["spec-audit", "no_such_file.py:sampler"]) == 2


def test_detectable_tv_is_what_the_test_detects(one_thread):
    """Power check at the alternative the bound is tight for: d_i = 2 TV s_i pi_i with signs s
    splitting the mass in halves (then n sum d_i**2 / pi_i = 4 n TV**2 exactly). At the detectable
    TV it must be rejected with the stated power."""
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    n, alpha, power = 4000, 0.01, 0.9
    tv = st.detectable_tv(n, 3, alpha, power)
    alt = probs + 2 * tv * probs * torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    ids = st.bins(probs, n)
    rejected = 0
    trials = 400
    for _ in range(trials):
        counts = torch.bincount(torch.multinomial(alt, n, replacement=True, generator=g), minlength=4)
        stat, df = st.pearson(counts, probs, ids)
        rejected += st.chi2_sf(stat, df) < alpha
    lo = sps.binom.ppf(1e-6, trials, power)
    print(f"tv={tv:.4f}: rejected {rejected}/{trials} (power {power}, 1e-6 lower bound {lo})")
    assert rejected >= lo
    assert math.isclose(st.samples_for_tv(tv, 3, alpha, power), n, rel_tol=1e-6)
