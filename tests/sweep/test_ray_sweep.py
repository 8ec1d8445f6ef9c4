"""``--executor ray``: a tiny sweep on a local Ray instance stores the same rows as the local executor."""

from __future__ import annotations

import pytest
from _sweep_helpers import TINY_COMPARE_POINTS, TINY_KERNEL_POINTS, write_spec

from attnum.store.db import open_store
from attnum.sweep.executors import SweepOptions, run_sweep
from attnum.sweep.spec import load_spec

ray = pytest.importorskip("ray", reason="ray is not installed; install the extra: pip install 'attnum[ray]'")


def test_ray_local_matches_local_executor_and_resumes(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # start a local instance (num_cpus = --jobs)
    spec = load_spec(write_spec(tmp_path))
    total = TINY_COMPARE_POINTS + TINY_KERNEL_POINTS
    summary = run_sweep(spec, SweepOptions(out=tmp_path / "ray", jobs=2, executor="ray", quiet=True))
    assert (summary.planned, summary.ran, summary.failed) == (total, total, 0)
    assert not ray.is_initialized()  # the executor shut down the instance it started

    run_sweep(spec, SweepOptions(out=tmp_path / "local", jobs=1, quiet=True))
    with open_store(tmp_path / "ray") as a, open_store(tmp_path / "local") as b:
        ra = {r["key"]: r for r in a.rows()}
        rb = {r["key"]: r for r in b.rows()}
        runs = a.runs()
    assert ra.keys() == rb.keys() and len(ra) == total
    for key, row in ra.items():
        strip = lambda m: {k: v for k, v in m.items() if k != "timing_s"}
        assert strip(row["metrics"]) == strip(rb[key]["metrics"]), row["config"]
    assert runs[0]["executor"] == "ray" and runs[0]["status"] == "complete"

    again = run_sweep(spec, SweepOptions(out=tmp_path / "ray", jobs=2, executor="ray", quiet=True))
    assert (again.skipped, again.ran) == (total, 0)  # resume is the same as with the local executor
