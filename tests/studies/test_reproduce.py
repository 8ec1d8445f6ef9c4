"""`attnum reproduce`: built-in specs, and the smoke profile end to end (store, every figure, report)."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
import torch
from _sweep_helpers import smoke_reproduction

from attnum.store.db import open_store
from attnum.studies.paper.profiles import paper_spec
from attnum.studies.paper.report.findings import CLAIMS
from attnum.sweep.registry import VERDICTS

FIGURES = ("fig3", "fig4", "fig5", "fig6a", "fig6b", "fig6c", "grid", "kernels")
FIGURE_GROUPS = {"fig3", "fig3-e8", "fig3-e11", "fig4", "fig5", "fig6a", "fig6b", "fig6c", "grid", "grid-dist"}
GROUPS = FIGURE_GROUPS | {"eager", "attribute", "grid-mma"}
PAPER_PROFILES = ("quick", "full", "smoke")


@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_profiles_cover_every_figure_under_both_policies_and_variants(profile):
    spec = paper_spec(profile)
    assert {g.name for g in spec.groups} == GROUPS
    for group in spec.groups:
        pts = group.points
        assert {p.policy for p in pts} == {"uniform", "fa2"}
        if group.name in FIGURE_GROUPS:
            assert {p.variant for p in pts} == {"fa1", "fa2"}
            assert len({p.seed for p in pts}) >= 2  # several seeds: the figures show their spread
    eager = next(g for g in spec.groups if g.name == "eager")
    assert {p.baseline_policy for p in eager.points} == {"torch-eager"}
    attribute = next(g for g in spec.groups if g.name == "attribute")
    assert {p.kind for p in attribute.points} == {"attribute"}
    tc = next(g for g in spec.groups if g.name == "grid-mma")  # the headline's cells under the tensor cores
    assert {p.mma for p in tc.points} == {"sm80", "sm90"} and {p.variant for p in tc.points} == {"fa1", "fa2"}
    assert {p.format for p in tc.points} == {"bf16"}
    fig3e8 = next(g for g in spec.groups if g.name == "fig3-e8")
    assert {p.format for p in fig3e8.points} >= {"e8m3", "e8m23"}


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_grid_reaches_the_many_tile_regime(profile):
    """N >= 4096 with Bc <= 32 (where flash's excess error appears), over policy, variant and dist."""
    grid = [p for g in paper_spec(profile).groups if g.name in ("grid", "grid-dist") for p in g.points]
    many = [p for p in grid if p.seq_len >= 4096 and p.tiles().Bc <= 32]
    assert many and {p.policy for p in many} == {"uniform", "fa2"} and {p.variant for p in many} == {"fa1", "fa2"}
    assert len({p.dist for p in many}) >= 2 and len({p.seed for p in grid}) >= 3
    assert max(p.seq_len for p in grid) >= 8192
    attribute = next(g for g in paper_spec(profile).groups if g.name == "attribute")
    assert any(p.seq_len >= 4096 and p.tiles().Bc <= 16 for p in attribute.points)


def test_full_profile_reaches_paper_scale():
    spec = paper_spec("full")
    lengths = {p.seq_len for g in spec.groups for p in g.points}
    assert max(lengths) >= 16384
    fmts = {p.format for g in spec.groups for p in g.points}
    assert {"bf16", "fp16", "tf32", "fp32", "fp64"} <= fmts and {f"e11m{y}" for y in range(3, 53)} <= fmts


@pytest.mark.slow  # tens of seconds to minutes: left out of pytest -m "not slow" (README)
def test_smoke_reproduction_writes_store_figures_and_report(tmp_path_factory):
    out = smoke_reproduction(tmp_path_factory)
    with open_store(out) as store:
        counts = store.counts()
        rows = store.rows()
    assert counts["done"] == counts["planned"] == len(paper_spec("smoke").planned()) and counts["failed"] == 0
    for name in FIGURES:
        for ext in ("png", "svg"):
            assert (out / "figures" / f"{name}.{ext}").stat().st_size > 10_000, f"{name}.{ext}"
    page = (out / "report.html").read_text()
    # Every claim under both policies and both variants, each with a computed verdict: once at a glance,
    # once per claim's section, and the claim's overall verdict.
    verdicts = re.findall(r"<span class='(?:holds|nothold|nottested|construct|mixed)'>([^<]+)</span>", page)
    assert len(verdicts) == len(CLAIMS) * (4 + 4 + 1)
    assert set(verdicts) <= set(VERDICTS)
    assert page.count("<table class='map'>") == len(CLAIMS)  # a verdict map per claim
    assert "holds by construction in the forward pass" in page  # Fig. 6b, with its reason
    assert "dominant site: " in page  # Fig. 4 cites the attribute points
    for name in ("budget-uniform-fa2-N128-Bc4-s0", "budget-fa2-fa2-N128-Bc4-s0"):
        assert (out / "figures" / f"{name}.png").is_file()
    assert "torch-sdpa-math" in page and "unavailable" in page  # real kernels listed, CUDA ones unavailable
    # The headline's cells under the tensor-core models: every grid-mma config, with its exact twin.
    from attnum.studies.paper.report.mma_cells import mma_cells

    tc = {(p.policy, p.variant, p.seq_len, p.block_k) for g in paper_spec("smoke").groups if g.name == "grid-mma"
          for p in g.points}
    cells = mma_cells(rows)
    assert {c.coords for c in cells} == tc and all(set(c.ratio) == {"exact", "sm80", "sm90"} for c in cells)
    assert "<h2>Tensor cores</h2>" in page and "tensor-core instructions" in page
    # Environment recorded per point: versions and commit.
    env = json.loads(sqlite3.connect(out / "attnum.sqlite").execute("SELECT env FROM environments").fetchone()[0])
    assert {"torch", "python", "git_commit"} <= set(env)
    # Which vectorised CPU kernels torch dispatched to (AVX2, AVX512, ...): it changes CPU results.
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert all(r["wall_s"] > 0 for r in rows)


@pytest.mark.slow  # tens of seconds to minutes: left out of pytest -m "not slow" (README)
def test_report_draws_only_what_the_store_holds(tmp_path_factory, tmp_path):
    """Drop the Fig. 5 rows from a copy of the store: the report has no Fig. 5 and recomputes nothing."""
    import shutil

    from attnum.report.html import write_report

    src = smoke_reproduction(tmp_path_factory)
    shutil.copy(src / "attnum.sqlite", tmp_path / "attnum.sqlite")
    con = sqlite3.connect(tmp_path / "attnum.sqlite")
    con.execute("DELETE FROM points WHERE key IN (SELECT key FROM planned WHERE groups LIKE '%fig5%')")
    con.commit()
    con.close()
    write_report(tmp_path)
    assert not (tmp_path / "figures" / "fig5.png").exists()
    assert (tmp_path / "figures" / "fig4.png").exists()
    with open_store(tmp_path) as store:
        assert store.counts()["missing"] > 0  # nothing was re-run to fill the gap
