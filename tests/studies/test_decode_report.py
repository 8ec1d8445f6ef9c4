"""`attnum reproduce --profile inference-smoke`: the store holds decode and FP8-table rows, the report draws
every inference figure from them, and the findings are computed from the data."""

from __future__ import annotations

import pytest

from attnum.cli import main
from attnum.store.db import open_store
from attnum.studies.serving.inference import inference_spec, point_from_config
from attnum.sweep.registry import all_findings

INFERENCE_FIGURES = {"decode-splits", "decode-pages", "decode-kv-format", "decode-gqa", "decode-mla", "fp8-table"}


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory):
    out = tmp_path_factory.mktemp("inference-smoke")
    assert main(["reproduce", "--profile", "inference-smoke", "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    return out


def test_points_round_trip_through_their_stored_config():
    for key, (point, groups) in inference_spec("inference-smoke").planned().items():
        assert point_from_config(point.config()).key == key and groups


def test_the_report_draws_every_inference_figure_from_the_store(reproduction):
    pngs = {p.stem for p in (reproduction / "figures").glob("*.png")}
    assert pngs == INFERENCE_FIGURES
    page = (reproduction / "report.html").read_text()
    assert "<h2>Inference</h2>" in page and "Table 3" in page and page.count("<figure") == len(INFERENCE_FIGURES)
    assert "Fig. 3" not in page  # the paper's claims have nothing to judge in an inference store


def test_findings_come_from_the_rows(reproduction):
    with open_store(reproduction) as store:
        rows = store.rows()
        counts = store.counts()
    assert counts["done"] == counts["planned"] == len(inference_spec("inference-smoke").planned())
    found = {f.claim_id: f for f in all_findings(rows)}
    assert set(found) == {"splits", "pages", "kv-fp8", "mla", "fp8"}
    assert found["splits"].verdict == "holds" and found["mla"].verdict == "holds"
    assert found["kv-fp8"].numbers["error_ratio"] > 1 and found["kv-fp8"].numbers["speedup_h100"] > 1
