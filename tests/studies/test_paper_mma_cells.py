"""The paper report's tensor-core table (attnum.studies.paper.report.mma_cells): grid-mma rows paired with the grid's
exact rows by configuration and seed, medians over the seeds every model has, and a sentence that names the
largest move and every cell that crosses the headline's line."""

from __future__ import annotations

import math

from attnum.studies.paper.report.mma_cells import mma_cells, mma_sentence


def _row(group: str, seed: int, ratio: float, mma: str | None = None, *, n: int = 4096, policy: str = "uniform",
         status: str = "done") -> dict:
    config = {"policy": policy, "variant": "fa1", "seq_len": n, "block_k": 16, "format": "bf16", "seed": seed}
    if mma:
        config["mma"] = mma
    return {"kind": "compare", "status": status, "groups": [group], "config": config,
            "metrics": {"ratio": {"max_abs": ratio, "mean_abs": ratio / 2}, "flash_vs_golden": {"max_abs": ratio / 100}}}


def test_cells_pair_by_config_and_seed_and_use_only_seeds_every_model_has():
    rows = [_row("grid", s, r) for s, r in ((0, 8.0), (1, 9.0), (2, 100.0))]  # seed 2 has no mma twin
    rows += [_row("grid-mma", s, r, "sm80") for s, r in ((0, 8.5), (1, 9.5))]
    rows += [_row("grid-mma", s, r, "sm90") for s, r in ((0, 7.0), (1, 7.5), (2, 1.0))]  # seed 2: no sm80
    rows += [_row("grid-mma", 0, 50.0, "sm90", status="failed")]
    rows += [_row("grid", 0, 3.0, n=1024), _row("grid-mma", 0, 3.3, "sm80", n=1024)]  # no sm90 row: left out
    cells = mma_cells(rows)
    assert [c.coords for c in cells] == [("uniform", "fa1", 4096, 16)]
    c = cells[0]
    assert c.seeds == (0, 1) and set(c.ratio) == {"exact", "sm80", "sm90"}
    assert (c.ratio["exact"], c.ratio["sm80"], c.ratio["sm90"]) == (8.5, 9.0, 7.25)
    assert math.isclose(c.flash_err["sm90"], 0.0725)
    assert mma_cells([r for r in rows if "grid-mma" not in r["groups"]]) == []


def test_sentence_names_the_largest_move_and_each_crossing():
    rows = [_row("grid", 0, 3.0, n=1024), _row("grid-mma", 0, 3.0, "sm80", n=1024),
            _row("grid-mma", 0, 3.5, "sm90", n=1024),
            _row("grid", 0, 9.0), _row("grid-mma", 0, 9.09, "sm80"), _row("grid-mma", 0, 9.0, "sm90")]
    text = mma_sentence(mma_cells(rows), 3.16)
    assert "at most 16.67%" in text and "sm90, uniform / fa1, N = 1024" in text and "at most 16.667%" in text
    assert "1 of them cross the 3.2x line" in text and "(3x -> 3.5x)" in text
    calm = mma_sentence(mma_cells(rows[3:]), 3.16)
    assert "at most 1.00%" in calm and "No cell crosses" in calm
    assert mma_sentence([], 3.16) == ""
    same = [_row("grid", 0, 9.0), _row("grid-mma", 0, 9.0, "sm80"), _row("grid-mma", 0, 9.0, "sm90")]
    assert "does not move from the exact model in any cell" in mma_sentence(mma_cells(same), 3.16)
