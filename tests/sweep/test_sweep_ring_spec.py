"""Sweep specs with kind = "ring" and kind = "spec": through `attnum sweep` into a store, resumed, exported
and reported, the stored numbers equal to calling the studies directly; bad axes exit 2 with one line."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from attnum.cli import main
from attnum.studies.parallel.point import RingPoint
from attnum.studies.parallel.ring_study import RingConfig, run_ring
from attnum.studies.speculative.point import SpecPoint
from attnum.studies.speculative.spec_decode import SpecConfig, run_spec

pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = """
name = "ring-spec-tiny"
[[group]]
name = "ring"
[group.axes]
kind = "ring"
shards = [1, 2]
layout = ["contiguous", "zigzag"]
seq_len = 32
heads = 2
head_dim = 8
[[group]]
name = "spec"
[group.axes]
kind = "spec"
vocab = 4
k = [1, 2]
format = ["bf16", "e4m3fn"]
"""
TIMINGS = ("sim_seconds", "flash_seconds", "seconds")


def _sweep(tmp_path, text, capsys):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    code = main(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--quiet"])
    return code, capsys.readouterr()


def test_ring_and_spec_points_sweep_store_export_report(tmp_path, capsys):
    from attnum.store.db import open_store

    code, _ = _sweep(tmp_path, SPEC, capsys)
    assert code == 0
    with open_store(tmp_path / "out") as store:
        rows = store.rows()
    assert sorted(r["kind"] for r in rows) == ["ring"] * 4 + ["spec"] * 4
    assert all(r["status"] == "done" for r in rows)
    for r in rows:
        c = r["config"]
        if r["kind"] == "ring":
            (want,) = run_ring(RingConfig(shards=(c["shards"],), layout=(c["layout"],), merge_policy=("fp32",),
                                          policy="fa2:bf16", seq_len=32, heads=2, head_dim=8))["rows"]
            assert RingPoint(**c).key == r["key"]
        else:
            (want,) = run_spec(SpecConfig(vocab=4, k=(c["k"],), format=(c["format"],)))["rows"]
            assert SpecPoint(**c).key == r["key"]
        got = r["metrics"]
        for name, value in want.items():
            if name in TIMINGS or name in c:
                continue
            assert got[name] == value, (r["kind"], name)  # deterministic: exact equality
    ring1 = [r for r in rows if r["kind"] == "ring" and r["config"]["shards"] == 1]
    assert all(r["metrics"]["ratio_to_single"] == 1.0 for r in ring1)  # one shard is single-device flash
    spec = [r for r in rows if r["kind"] == "spec"]
    assert all(r["metrics"]["tv"] >= 0 and r["metrics"]["tv_plain"] >= 0 for r in spec)

    # resumable: a second run plans nothing new
    code, captured = _sweep(tmp_path, SPEC, capsys)
    assert code == 0 and "8 already done, 0 run" in captured.out + captured.err

    assert main(["export", str(tmp_path / "out"), "--to", "csv"]) == 0
    capsys.readouterr()
    table = list(csv.DictReader((tmp_path / "out" / "points.csv").open()))
    by_key = {r["key"]: r for r in rows}
    assert len(table) == 8
    for t in table:
        field = "metrics.max_abs" if t["kind"] == "ring" else "metrics.tv"
        assert float(t[field]) == by_key[t["key"]]["metrics"][field.split(".")[1]]

    assert main(["report", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    html = (tmp_path / "out" / "report.html").read_text()
    for name in ("sweep-ring-ring-shards", "sweep-ring-ring-layout", "sweep-spec-spec-k", "sweep-spec-spec-format"):
        assert name in html


def test_point_defaults_follow_the_studies():
    ring = {f.name: f.default for f in dataclasses.fields(RingConfig)}
    point = {f.name: f.default for f in dataclasses.fields(RingPoint)}
    for name in ("merge_method", "seq_len", "heads", "kv_heads", "head_dim", "batch", "causal", "block_k", "seed"):
        assert point[name] == ring[name], name
    spec = {f.name: f.default for f in dataclasses.fields(SpecConfig)}
    point = {f.name: f.default for f in dataclasses.fields(SpecPoint)}
    for name in ("vocab", "draft_format", "noise", "q_zero", "zero_residual", "uniform_bits", "logit_std",
                 "draft_noise", "seed"):
        assert point[name] == spec[name], name


@pytest.mark.parametrize("kind, axis, value, param", [
    ("ring", "shards", 0, "shards"),
    ("ring", "shards", 3, "shards"),  # 3 does not divide seq_len = 32
    ("ring", "layout", '"diagonal"', "layout"),
    ("ring", "backend", '"gloo"', "backend"),
    ("ring", "policy", '"fa2:bf16"', "policy"),  # the format axis gives the format
    ("ring", "vocab", 4, "vocab"),  # a spec axis: not an axis of kind 'ring'
    ("spec", "vocab", 1, "vocab"),
    ("spec", "k", 0, "k"),
    ("spec", "vocab", 4096, "vocab"),  # vocab**(k+1) too large to enumerate
    ("spec", "format", '"bf17"', "format"),
    ("spec", "noise", '"pink"', "noise"),
    ("spec", "shards", 2, "shards"),
])
def test_bad_axis_values_exit_2_with_one_line(tmp_path, capsys, kind, axis, value, param):
    text = f'name = "bad"\n[axes]\nkind = "{kind}"\nseq_len = 32\n{axis} = [{value}]\n' if kind == "ring" else \
        f'name = "bad"\n[axes]\nkind = "{kind}"\n{axis} = [{value}]\n'
    code, captured = _sweep(tmp_path, text, capsys)
    assert code == 2 and param in captured.err and captured.err.count("\n") == 1, captured.err
