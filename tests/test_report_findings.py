"""Findings come from the data: the same rule flips its verdict when the numbers flip."""

from __future__ import annotations

import math

import pytest

from attnum.experiments.findings import TEN_X_BAND, compute_findings
from attnum.experiments.results import spearman


def _row(group, *, fmt="bf16", mbits=7, seed=0, n=1024, fvb=1e-3, fvg=1e-3, bvg=1e-3, policy="uniform",
         variant="fa2", swap=False, square=False, tiles=(64, 64), mean=None):
    return {
        "kind": "compare", "status": "done", "groups": [group],
        "config": {"format": fmt, "policy": policy, "variant": variant, "seq_len": n, "seed": seed,
                   "swap_blocks": swap, "square": square, "sram": None},
        "metrics": {
            "flash_vs_baseline": {"max_abs": fvb, "mean_abs": fvb / 10 if mean is None else mean},
            "flash_vs_golden": {"max_abs": fvg}, "baseline_vs_golden": {"max_abs": bvg},
            "tiles": {"Br": tiles[0], "Bc": tiles[1]}, "format_bits": {"ebits": 8, "mbits": mbits},
        },
    }


def _verdicts(rows, claim):
    return {(f.policy, f.variant): f for f in compute_findings(rows) if f.claim_id == claim}


@pytest.mark.parametrize("direction, verdict", [(-1, "holds"), (+1, "does not hold")])
def test_mantissa_trend_verdict_follows_the_data(direction, verdict):
    rows = [_row("fig3", fmt=f"e8m{m}", mbits=m, fvb=2.0 ** (direction * m)) for m in (3, 7, 10, 23)]
    (f,) = _verdicts(rows, "mantissa").values()
    assert f.verdict == verdict and f.numbers["rho"] == pytest.approx(direction * 1.0)
    assert "e8m3 (3 mantissa bits)" in f.measured


@pytest.mark.parametrize("ratio", [1.5, 3.0, 10.0, 40.0])
def test_ten_x_measures_the_median_ratio_at_the_largest_n(ratio):
    rows = [_row("fig4", seed=s, n=512, fvg=1.0, bvg=1.0) for s in range(3)]  # a smaller N is ignored
    rows += [_row("fig4", seed=s, n=4096, fvg=ratio * 1e-3 * (1 + s), bvg=1e-3 * (1 + s)) for s in range(3)]
    (f,) = _verdicts(rows, "ten_x").values()
    assert f.numbers == {"ratio": pytest.approx(ratio), "seq_len": 4096}
    assert f.verdict == ("holds" if TEN_X_BAND[0] <= ratio <= TEN_X_BAND[1] else "does not hold")
    assert f"N=4096: {ratio:.2g}x" in f.measured


def test_per_policy_and_variant_separately():
    rows = []
    for policy, grow in (("uniform", True), ("fa2", False)):
        for variant in ("fa1", "fa2"):
            for n in (256, 512, 1024, 2048):
                v = n * 1e-6 if grow else 1e-3 / n
                rows.append(_row("fig5", n=n, fvb=v, policy=policy, variant=variant, mean=v))
    found = _verdicts(rows, "seq_len")
    assert {k: f.verdict for k, f in found.items()} == {
        ("fa2", "fa1"): "does not hold", ("fa2", "fa2"): "does not hold",
        ("uniform", "fa1"): "holds", ("uniform", "fa2"): "holds"}


def test_swap_and_square_use_only_pairs_whose_tiles_changed():
    rows = []
    for seed in range(3):
        rows.append(_row("fig6a", seed=seed, fvb=1e-3, tiles=(64, 256)))
        rows.append(_row("fig6a", seed=seed, fvb=2e-3, swap=True, tiles=(256, 64)))
        rows.append(_row("fig6b", seed=seed, fvb=1e-3, tiles=(32, 32)))
        rows.append(_row("fig6b", seed=seed, fvb=5e-3, square=True, tiles=(32, 32)))  # unchanged: ignored
    swap = next(iter(_verdicts(rows, "swap").values()))
    assert swap.verdict == "holds" and swap.numbers == {"geomean_ratio": pytest.approx(2.0), "pairs": 3}
    square = next(iter(_verdicts(rows, "square").values()))
    assert square.verdict == "not tested" and "no point" in square.measured


def test_larger_tiles_trend_by_block_area():
    rows = [_row("fig6c", fvb=1.0 / bc, tiles=(min(bc, 64), bc)) for bc in (16, 64, 256)]
    (f,) = _verdicts(rows, "tiles").values()
    assert f.verdict == "holds" and f.numbers["rho"] == pytest.approx(-1.0)


def test_no_rows_means_not_tested_never_a_verdict():
    rows = [_row("other")]
    assert {f.verdict for f in compute_findings(rows)} == {"not tested"}


def test_spearman_against_hand_computed_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # ranks x: 1,2,3,4; y: 1,3,2,4 -> d^2 = 0+1+1+0 = 2 -> 1 - 6*2/(4*15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [5, 5, 5]) == 0.0  # constant: no trend
    assert math.isnan(spearman([1, 2], [1, 2]))
