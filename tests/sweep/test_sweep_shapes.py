"""GQA (kv_heads), kv_len != seq_len and bottom-right causal alignment as sweep axes, end to end:
TOML spec -> `attnum sweep` -> store -> the same numbers as a direct computation."""

from __future__ import annotations

import math

import pytest
import torch
from _sweep_helpers import cli, write_spec

from attnum.attention import golden_attention
from attnum.store.db import open_store
from attnum.studies.paper.compare import CompareConfig, run_compare
from attnum.studies.paper.kernel_point import point_inputs
from attnum.studies.paper.point import Point

SPEC = """
name = "shapes"
kernels = ["torch-sdpa-math"]
[defaults]
heads = 4
head_dim = 16
block_q = 16
block_k = 16
policy = "fa2"
format = "bf16"
seq_len = 40
causal = true
[axes]
kv_heads = [1, 2]
kv_len = [24, 56]
causal_alignment = ["top_left", "bottom_right"]
"""


@pytest.fixture(scope="module")
def shapes_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shapes")
    assert cli("sweep", write_spec(tmp, SPEC), "--out", tmp / "out", "--quiet") == 0
    with open_store(tmp / "out") as store:
        yield store.rows(status=None), store, tmp


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_every_point_done_with_the_axes_in_its_config(shapes_store):
    rows, _, _ = shapes_store
    compare = [r for r in rows if r["kind"] == "compare"]
    assert len(compare) == 8 and len(rows) == 16 and {r["status"] for r in rows} == {"done"}
    seen = {(r["config"]["kv_heads"], r["config"]["kv_len"], r["config"]["causal_alignment"]) for r in compare}
    assert seen == {(g, s, a) for g in (1, 2) for s in (24, 56) for a in ("top_left", "bottom_right")}
    for r in compare:  # the emulation ran over S keys: Tc = ceil(S / Bc)
        assert r["metrics"]["tiles"]["Tc"] == math.ceil(r["config"]["kv_len"] / 16)


def test_stored_compare_metrics_equal_a_direct_run(shapes_store):
    rows, _, _ = shapes_store
    for r in (r for r in rows if r["kind"] == "compare"):
        c = r["config"]
        direct = run_compare(CompareConfig(
            policy="fa2", format="bf16", seq_len=40, kv_len=c["kv_len"], head_dim=16, heads=4, kv_heads=c["kv_heads"],
            block_q=16, block_k=16, causal=True, causal_alignment=c["causal_alignment"]))
        for pair in ("flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline"):
            assert r["metrics"][pair]["max_abs"] == direct["metrics"][pair]["max_abs"], (c, pair)


def test_alignment_reaches_the_numerics(shapes_store):
    rows, _, _ = shapes_store
    by = {(r["config"]["kv_heads"], r["config"]["kv_len"], r["config"]["causal_alignment"]):
          r["metrics"]["flash_vs_golden"]["max_abs"] for r in rows if r["kind"] == "compare"}
    for g in (1, 2):
        for s in (24, 56):  # S != N: the diagonals differ, so do the outputs and their errors
            assert by[(g, s, "top_left")] != by[(g, s, "bottom_right")]


def _bottom_right_keep(N: int, S: int) -> torch.Tensor:
    i = torch.arange(N)[:, None]
    j = torch.arange(S)[None, :]
    return j <= i + (S - N)


def test_kernel_rows_get_gqa_and_the_bottom_right_mask(shapes_store):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows, _, _ = shapes_store
    krows = [r for r in rows if r["kind"] == "kernels"]
    assert len(krows) == 8
    for r in krows:
        c = r["config"]
        point = Point.from_config(c)
        q, k, v = (t.to(torch.bfloat16) for t in point_inputs(point))
        assert k.shape == (1, c["kv_heads"], c["kv_len"], 16) and q.shape == (1, 4, 40, 16)
        golden = golden_attention(q.double(), k.double(), v.double(), is_causal=True,
                                  causal_alignment=c["causal_alignment"])
        if c["causal_alignment"] == "bottom_right":
            kw = {"attn_mask": _bottom_right_keep(40, c["kv_len"])}
        else:
            kw = {"is_causal": True}
        with sdpa_kernel(SDPBackend.MATH):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
        expect = (out.double() - golden).abs().max().item()
        got = r["metrics"]["kernels"]["torch-sdpa-math"]
        assert got["available"] and _same(got["max_abs"], expect), (c, got, expect)


def test_resume_runs_nothing_and_keys_hold(shapes_store, capsys):
    rows, _, tmp = shapes_store
    capsys.readouterr()
    assert cli("sweep", tmp / "spec.toml", "--out", tmp / "out", "--quiet") == 0
    assert "16 points planned, 16 already done, 0 run" in capsys.readouterr().out
    for r in rows:
        assert Point.from_config(r["config"]).key == r["key"]


def test_gqa_bottom_right_points_run_on_each_device(tmp_path, device):
    """The same shapes on each device (CUDA is an opt-in re-run, skipped without a GPU)."""
    spec = SPEC.replace("[axes]", f'device = "{device}"\n[axes]').replace("kv_heads = [1, 2]", "kv_heads = [2]")
    assert cli("sweep", write_spec(tmp_path, spec), "--out", tmp_path / "out", "--quiet") == 0
    with open_store(tmp_path / "out") as store:
        rows = store.rows(status=None)
    assert len(rows) == 8 and {r["status"] for r in rows} == {"done"}
    for r in rows:
        assert r["config"]["device"] == device
        if r["kind"] == "kernels":
            assert r["metrics"]["kernels"]["torch-sdpa-math"]["available"], r["metrics"]
