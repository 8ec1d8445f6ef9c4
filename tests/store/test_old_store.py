"""A store written before the study families moved to ``attnum.studies`` reads unchanged.

``tests/data/old_store/attnum.sqlite`` was written by attnum at commit dfaee26 (how: ``make_store.py``
beside it): one group per point kind of that layout (compare, kernels, attribute, decode, ring, spec,
fp8-table). Today's code must find the same keys for the same configs, plan the same spec hash, and
``runs``, ``export`` and ``report`` must read it; the CSV export is byte-for-byte the one dfaee26 wrote.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil

import _paths
import pytest

from attnum.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

DATA = _paths.TESTS / "data" / "old_store"
# sha256 of `attnum export DIR -o points.csv` run by attnum at dfaee26 on this store
OLD_EXPORT_SHA256 = "0547db6719890047380d126a138dd902acdcd88f10c3fddd4941907ea8d2a4da"
KINDS = {"compare": 2, "kernels": 2, "attribute": 1, "decode": 2, "ring": 1, "spec": 1, "fp8-table": 1}


@pytest.fixture
def old(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    shutil.copy(DATA / "attnum.sqlite", out / "attnum.sqlite")
    return out


def test_every_stored_config_keys_to_its_stored_key(old):
    from attnum.store.db import open_store
    from attnum.sweep.registry import point_from_config

    with open_store(old) as store:
        rows = store.rows(status=None)
    assert {k: sum(r["kind"] == k for r in rows) for k in KINDS} == KINDS
    for r in rows:
        point = point_from_config(r["config"])
        assert (point.key, point.config()) == (r["key"], r["config"]), r["kind"]


def test_the_same_spec_plans_the_same_hash(old):
    from attnum.store.db import open_store
    from attnum.studies.serving.inference import FP8TablePoint
    from attnum.sweep.spec import Group, load_spec

    spec = load_spec(DATA / "spec.toml")
    fp8 = Group(name="fp8-table", points=(FP8TablePoint(seq_len=16, heads=1, head_dim=8),))
    spec = dataclasses.replace(spec, groups=spec.groups + (fp8,))
    with open_store(old) as store:
        assert store.meta()["spec_hash"] == spec.spec_hash
        assert {r["key"] for r in store.rows(status=None)} == set(spec.planned())


def test_runs_export_and_report_read_it(old, capsys):
    assert main(["runs", str(old)]) == 0
    assert "10/10 points done" in capsys.readouterr().out
    assert main(["export", str(old), "-o", str(old / "points.csv")]) == 0
    assert hashlib.sha256((old / "points.csv").read_bytes()).hexdigest() == OLD_EXPORT_SHA256
    # dfaee26 itself stopped here with KeyError ('mantissa', 'fa2', 'decode'): its findings table mixed the
    # paper's claims and the serving ones in one grid; each family now places its own.
    assert main(["report", str(old)]) == 0
    page = (old / "report.html").read_text()
    for heading in ("Findings", "Inference", "Other figures", "Real kernels", "Results by group", "Runs", "Spec"):
        assert f"<h2>{heading}</h2>" in page, heading
    figures = {p.stem for p in (old / "figures").glob("*.png")}
    assert figures == {"budget-fa2-fa2-N16-Bc8-s0", "sweep-compare-format", "fp8-table"}
    assert page.count("<figure") == len(figures)
