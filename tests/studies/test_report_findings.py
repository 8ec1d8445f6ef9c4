"""Findings come from the data: the same rule flips its verdict when the numbers flip, cell by cell."""

from __future__ import annotations

import math

import pytest

from attnum.studies.paper.report.cells import region
from attnum.studies.paper.report.findings import TEN_X_BAND, compute_findings, compute_maps
from attnum.sweep.results import spearman


def _row(group, *, fmt="bf16", mbits=7, seed=0, n=1024, fvb=1e-3, fvg=1e-3, bvg=1e-3, policy="uniform",
         variant="fa2", swap=False, square=False, tiles=(64, 64), mean=None, rel=None, dist="normal", sram=None,
         kind="compare"):
    return {
        "kind": kind, "status": "done", "groups": [group],
        "config": {"format": fmt, "policy": policy, "variant": variant, "seq_len": n, "seed": seed,
                   "swap_blocks": swap, "square": square, "sram": sram, "dist": dist},
        "metrics": {
            "flash_vs_baseline": {"max_abs": fvb, "mean_abs": fvb / 10 if mean is None else mean,
                                  "rel_max_abs": fvb if rel is None else rel,
                                  "rel_mean_abs": (fvb if rel is None else rel) / 10},
            "flash_vs_golden": {"max_abs": fvg}, "baseline_vs_golden": {"max_abs": bvg},
            "ratio": {"max_abs": fvg / bvg, "mean_abs": fvg / bvg},
            "tiles": {"Br": tiles[0], "Bc": tiles[1]}, "format_bits": {"ebits": 8, "mbits": mbits},
        },
    }


def _verdicts(rows, claim):
    return {(f.policy, f.variant): f for f in compute_findings(rows) if f.claim_id == claim}


def _map(rows, claim):
    return next(m for m in compute_maps(rows) if m.claim_id == claim)


@pytest.mark.parametrize("direction, verdict", [(-1, "holds"), (+1, "does not hold")])
def test_mantissa_trend_verdict_follows_the_data(direction, verdict):
    rows = [_row("fig3", fmt=f"e8m{m}", mbits=m, fvb=2.0 ** (direction * m)) for m in (3, 7, 10, 23)]
    (f,) = _verdicts(rows, "mantissa").values()
    assert f.verdict == verdict and f.numbers["rho"] == pytest.approx(direction * 1.0)
    assert "mantissa bits=3" in f.measured


@pytest.mark.parametrize("ratio", [1.5, 3.0, 10.0, 40.0])
def test_ten_x_is_judged_per_cell_on_the_median_of_per_seed_ratios(ratio):
    # N = 512: ratio 1 everywhere; N = 4096: per-seed ratios ratio/2, ratio, 3*ratio (median: ratio),
    # while the ratio of the seed medians of flash and baseline errors would be 3 * ratio / 2.
    rows = [_row("grid", seed=s, n=512) for s in range(3)]
    errs = [(ratio / 2 * 1e-3, 1e-3), (ratio * 2e-3, 2e-3), (3 * ratio * 1e-4, 1e-4)]
    rows += [_row("grid", seed=s, n=4096, fvg=f, bvg=b) for s, (f, b) in enumerate(errs)]
    m = _map(rows, "ten_x")
    by_n = {c.coords["seq_len"]: c for c in m.cells}
    assert by_n[512].verdict == "does not hold" and by_n[512].value == pytest.approx(1.0)
    assert by_n[4096].value == pytest.approx(ratio)
    assert by_n[4096].verdict == ("holds" if TEN_X_BAND[0] <= ratio <= TEN_X_BAND[1] else "does not hold")
    assert f"{ratio:.2g}x (median of 3 per-seed ratios" in by_n[4096].text
    (f,) = _verdicts(rows, "ten_x").values()
    assert f.verdict == ("mixed" if by_n[4096].verdict == "holds" else "does not hold")
    if by_n[4096].verdict == "holds":
        assert "every cell where it holds has N=4096" in f.measured


def test_ten_x_cites_the_dominant_site_of_an_attribute_point():
    rows = [_row("grid", seed=s, n=8192, fvg=3e-2, bvg=1e-3) for s in range(2)]
    for r, b in zip(rows, (0.9, 1.0)):
        r["metrics"]["flash_vs_golden"]["bias"], r["metrics"]["baseline_vs_golden"]["bias"] = b, -b / 100
    attr = _row("attribute", n=8192, kind="attribute")
    attr["metrics"]["dominant"] = {"flash": {"site": "row_sum", "alone": 0.99, "left": 0.14}}
    (cell,) = _map([*rows, attr], "ten_x").cells
    assert cell.verdict == "holds" and "dominant site: row_sum (alone 0.99" in cell.text
    assert "magnitude bias flash +0.95, baseline -0.01" in cell.text and cell.numbers["bias_flash"] == 0.95


def test_cells_keep_every_varying_field_apart():
    """Two input distributions are two cells, never pooled: here the claim holds for one and not the other."""
    rows = [_row("grid", seed=s, n=4096, dist=d, fvg=(10e-3 if d == "uniform" else 1e-3)) for s in range(2)
            for d in ("normal", "uniform")]
    cells = {c.coords["dist"]: c.verdict for c in _map(rows, "ten_x").cells}
    assert cells == {"normal": "does not hold", "uniform": "holds"}


def test_seq_len_is_judged_on_relative_error():
    """The absolute error falls with N (|O| shrinks) while the error relative to mean |O| grows: it holds."""
    rows = [_row("fig5", n=n, fvb=1e-3 / n, rel=n * 1e-6, seed=s) for n in (256, 512, 1024, 2048) for s in range(2)]
    (f,) = _verdicts(rows, "seq_len").values()
    assert f.verdict == "holds" and f.numbers["rho"] == pytest.approx(1.0)
    rows = [_row("fig5", n=n, fvb=1e-3 * n, rel=1e-6 / n) for n in (256, 512, 1024)]
    assert next(iter(_verdicts(rows, "seq_len").values())).verdict == "does not hold"


def test_per_policy_and_variant_separately():
    rows = []
    for policy, grow in (("uniform", True), ("fa2", False)):
        for variant in ("fa1", "fa2"):
            for n in (256, 512, 1024, 2048):
                v = n * 1e-6 if grow else 1e-3 / n
                rows.append(_row("fig5", n=n, fvb=v, policy=policy, variant=variant, rel=v))
    found = _verdicts(rows, "seq_len")
    assert {k: f.verdict for k, f in found.items()} == {
        ("fa2", "fa1"): "does not hold", ("fa2", "fa2"): "does not hold",
        ("uniform", "fa1"): "holds", ("uniform", "fa2"): "holds"}


def test_swap_is_separated_from_the_bc_it_sets():
    rows = []
    for seed in range(3):
        rows.append(_row("fig6a", seed=seed, fvb=1e-3, tiles=(64, 256), sram=65536))
        rows.append(_row("fig6a", seed=seed, fvb=2e-3, swap=True, tiles=(256, 64), sram=65536))
        rows.append(_row("fig6c", seed=seed, fvb=2e-3, tiles=(64, 64), sram=16384))  # same Bc as swapped
    (swap,) = _verdicts(rows, "swap").values()
    assert swap.verdict == "holds" and swap.numbers["geomean_ratio"] == pytest.approx(2.0)
    assert swap.numbers["same_bc_ratio"] == pytest.approx(1.0) and "only through the Bc" in swap.measured
    assert "Bc 256->64" in swap.measured


@pytest.mark.parametrize("factor, verdict", [(1.0, "holds by construction"), (2.0, "does not hold")])
def test_square_holds_by_construction_but_is_still_checked(factor, verdict):
    rows = []
    for seed in range(3):
        rows.append(_row("fig6b", seed=seed, fvb=1e-3, tiles=(32, 64)))
        rows.append(_row("fig6b", seed=seed, fvb=factor * 1e-3, square=True, tiles=(64, 64)))
        rows.append(_row("fig6b", seed=seed, fvb=1e-3, tiles=(32, 32), sram=1))
        rows.append(_row("fig6b", seed=seed, fvb=5e-3, square=True, tiles=(32, 32), sram=1))  # unchanged: ignored
    m = _map(rows, "square")
    assert m.verdict == verdict and "only Bc enters a row's arithmetic" in m.note
    assert m.cells[0].numbers["pairs"] == 3


def test_square_without_a_changed_tile_is_not_tested():
    rows = [_row("fig6b", fvb=1e-3, tiles=(32, 32)), _row("fig6b", fvb=5e-3, square=True, tiles=(32, 32))]
    (f,) = _verdicts(rows, "square").values()
    assert f.verdict == "not tested" and "no pair" in f.measured


def test_larger_tiles_trend_by_bc():
    rows = [_row("fig6c", fvb=1.0 / bc, tiles=(min(bc, 64), bc), sram=256 * bc) for bc in (16, 64, 256)]
    (f,) = _verdicts(rows, "tiles").values()
    assert f.verdict == "holds" and f.numbers["rho"] == pytest.approx(-1.0)
    rows = [_row("fig6c", fvb=1.0 * bc, tiles=(min(bc, 64), bc), sram=256 * bc) for bc in (16, 64, 256)]
    assert next(iter(_verdicts(rows, "tiles").values())).verdict == "does not hold"


def test_no_rows_means_not_tested_never_a_verdict():
    rows = [_row("other")]
    assert {f.verdict for f in compute_findings(rows)} == {"not tested"}


def test_region_names_only_what_separates_the_cells():
    grid = [{"policy": p, "seq_len": n} for p in ("uniform", "fa2") for n in (1024, 4096, 8192)]
    held = [c for c in grid if c["policy"] == "uniform" and c["seq_len"] >= 4096]
    assert region(held, grid) == "policy=uniform; N in {4096, 8192}"
    assert region(grid, grid) == "everywhere in the grid" and region([], grid) == "nowhere"


def test_spearman_against_hand_computed_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # ranks x: 1,2,3,4; y: 1,3,2,4 -> d^2 = 0+1+1+0 = 2 -> 1 - 6*2/(4*15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [5, 5, 5]) == 0.0  # constant: no trend
    assert math.isnan(spearman([1, 2], [1, 2]))
