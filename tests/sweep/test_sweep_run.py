"""Running sweeps: stored numbers equal a direct computation, failures are data, jobs=2 agrees with jobs=1."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import _paths
import pytest
import torch
from _sweep_helpers import CLI, TINY_COMPARE_POINTS, TINY_KERNEL_POINTS, cli, cli_env, write_spec

from attnum.attention import golden_attention
from attnum.store.db import open_store
from attnum.studies.paper.compare import run_compare
from attnum.studies.paper.kernel_point import point_inputs
from attnum.studies.paper.point import Point
from attnum.sweep.executors import SweepOptions, run_sweep
from attnum.sweep.spec import load_spec, spec_from_dict


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny")
    spec = load_spec(write_spec(tmp))
    summary = run_sweep(spec, SweepOptions(out=tmp / "out", jobs=1, quiet=True))
    return spec, summary, tmp / "out"


def test_every_point_stored_once_with_core_numbers(tiny_run):
    spec, summary, out = tiny_run
    assert (summary.planned, summary.ran, summary.failed) == (TINY_COMPARE_POINTS + TINY_KERNEL_POINTS,) * 2 + (0,)
    with open_store(out) as store:
        rows = store.rows()
    assert len(rows) == len({r["key"] for r in rows}) == summary.planned
    for row in rows[:: 5]:
        if row["kind"] != "compare":
            continue
        direct = run_compare(Point.from_config(row["config"]).compare_config())
        for pair in ("flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline"):
            assert row["metrics"][pair]["max_abs"] == direct["metrics"][pair]["max_abs"]
        assert row["metrics"]["tiles"] == direct["tiles"]


def test_kernel_rows_match_sdpa_against_float64_golden(tiny_run):
    _, _, out = tiny_run
    with open_store(out) as store:
        krows = store.rows(kind="kernels")
    assert len(krows) == TINY_KERNEL_POINTS
    row = krows[0]
    point = Point.from_config(row["config"])
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[point.format]
    q, k, v = (t.to(dtype) for t in point_inputs(point))
    golden = golden_attention(q.double(), k.double(), v.double())
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        out_math = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    expect = (out_math.double() - golden).abs().max().item()
    got = row["metrics"]["kernels"]["torch-sdpa-math"]
    assert got["available"] and got["max_abs"] == expect
    # CUDA-only backends are listed as unavailable with a reason, not as errors.
    if not torch.cuda.is_available():
        assert row["metrics"]["kernels"]["torch-sdpa-cudnn"]["available"] is False
        assert "cuda" in row["metrics"]["kernels"]["torch-sdpa-cudnn"]["reason"]


def test_resume_skips_done_points(tiny_run):
    spec, summary, out = tiny_run
    again = run_sweep(spec, SweepOptions(out=out, jobs=1, quiet=True))
    assert (again.skipped, again.ran) == (summary.planned, 0)


def test_failing_point_recorded_and_sweep_continues(tmp_path, monkeypatch):
    import attnum.studies.paper.compare as compare_mod

    real = compare_mod.run_compare

    def flaky(cfg):  # a point that raises inside the numerics, as a bug or an OOM would
        if cfg.seq_len == 16:
            raise RuntimeError("simulated failure at seq_len=16")
        return real(cfg)

    monkeypatch.setattr(compare_mod, "run_compare", flaky)
    spec = spec_from_dict({"name": "f", "record": ["flash_vs_golden"], "defaults": {"heads": 1, "head_dim": 8},
                           "axes": {"seq_len": [8, 16], "seed": [0, 1], "format": "fp32"}})
    summary = run_sweep(spec, SweepOptions(out=tmp_path, quiet=True))
    assert (summary.planned, summary.failed) == (4, 2)
    with open_store(tmp_path) as store:
        failed = store.rows(status="failed")
        assert {r["config"]["seq_len"] for r in failed} == {16}
        assert all("simulated failure" in r["error"] for r in failed)
        assert store.counts()["done"] == 2
        # On resume the failed points are tried again (and fail again), still one row each.
        again = run_sweep(spec, SweepOptions(out=tmp_path, quiet=True))
        assert (again.ran, again.failed) == (2, 2)
        assert store.counts() == {"planned": 4, "done": 2, "failed": 2, "missing": 0}


def test_jobs2_process_pool_stores_the_same_numbers(tiny_run, tmp_path):
    spec, _, out = tiny_run
    proc = subprocess.Popen([sys.executable, "-c", CLI, "sweep", str(write_spec(tmp_path)), "--out", str(tmp_path / "out2"),
                             "--jobs", "2", "--quiet"], env=cli_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.wait(timeout=_paths.HANG_S) == 0, proc.stderr.read()
    assert _process_group(proc.pid) == []  # no worker (nor multiprocessing's resource tracker) outlives the sweep
    with open_store(out) as a, open_store(tmp_path / "out2") as b:
        ra = {r["key"]: r["metrics"] for r in a.rows()}
        rb = {r["key"]: r["metrics"] for r in b.rows()}
        workers = {r["worker"] for r in b.rows()}
    strip = lambda m: {k: v for k, v in m.items() if k != "timing_s"}
    assert {k: strip(v) for k, v in ra.items()} == {k: strip(v) for k, v in rb.items()}
    assert len(workers) == 2  # two worker processes did the work


def _process_group(pgid: int) -> list[str]:
    """Processes still in process group ``pgid`` (Linux /proc; [] elsewhere)."""
    left = []
    for d in (os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            if d.isdigit() and int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[2]) == pgid:
                left.append(open(f"/proc/{d}/comm").read().strip())
        except (OSError, ValueError, IndexError):
            pass
    return left


def test_runs_and_export(tiny_run, tmp_path, capsys):
    _, summary, out = tiny_run
    assert cli("runs", out) == 0
    assert f"{summary.planned}/{summary.planned} points done (100.0%)" in capsys.readouterr().out
    path = tmp_path / "p.csv"
    assert cli("export", out, "--to", "csv", "-o", path) == 0
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == summary.planned
    compare = [r for r in rows if r["kind"] == "compare"]
    assert all(float(r["metrics.flash_vs_golden.max_abs"]) > 0 for r in compare)
    assert {r["env.torch"] for r in rows} == {torch.__version__}
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow not installed (attnum[parquet])")
    assert cli("export", out, "--to", "parquet", "-o", tmp_path / "p.parquet") == 0
    table = pq.read_table(tmp_path / "p.parquet")
    assert table.num_rows == summary.planned
    assert sorted(table.column("metrics.flash_vs_golden.max_abs").to_pylist(), key=str) == sorted(
        (float(r["metrics.flash_vs_golden.max_abs"]) if r["metrics.flash_vs_golden.max_abs"] else None for r in rows),
        key=str)


def test_device_points_run_on_that_device(tmp_path, device):
    """The same tiny sweep on each device (CUDA is an opt-in re-run, skipped without a GPU)."""
    spec = spec_from_dict({"name": "dev", "defaults": {"heads": 1, "head_dim": 16, "block_q": 16, "block_k": 16},
                           "axes": {"seq_len": [40], "format": ["bf16", "fp32"], "device": device}})
    summary = run_sweep(spec, SweepOptions(out=tmp_path, quiet=True))
    assert summary.failed == 0
    with open_store(tmp_path) as store:
        rows = store.rows()
        envs = store.environments()
    assert {r["config"]["device"] for r in rows} == {device}
    assert {e["device"] for e in envs.values()} == {device}
    kernels = next(r for r in rows if r["kind"] == "kernels")["metrics"]["kernels"]
    assert kernels["torch-sdpa-math"]["available"]
    assert kernels["torch-sdpa-efficient"]["available"] == (device == "cuda")
