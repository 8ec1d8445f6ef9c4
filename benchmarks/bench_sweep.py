"""Sweep speed: quick-profile wall time, points/s, store overhead per point, --jobs 2 speedup.

    python benchmarks/bench_sweep.py            # everything (the quick profile takes 5-9 min)
    python benchmarks/bench_sweep.py --no-quick # store overhead and jobs speedup only (~1 min)

Prints one JSON object. Targets: quick profile <= 10 min on 2 cores (issue 3); store overhead
<= 5% of a point's compute at N = 1024; ``sweep --jobs 2`` >= 1.6x the throughput of ``--jobs 1`` on
2 idle cores (issue 21). The machine's own ceiling is measured in the same run: the same fixed
single-threaded torch work in 1 and in 2 processes at once (``ceiling``); on a loaded or SMT machine it
is below 2, and ``speedup / ceiling`` is the share of it the pool gets. The CPU model, AMX and the load
average are printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnum.store.db import Store
from attnum.studies.paper.point import Point
from attnum.sweep import memo
from attnum.sweep.executors import SweepOptions, run_sweep
from attnum.sweep.point_runner import run_point
from attnum.sweep.spec import spec_from_dict

CLI = "import sys; from attnum.cli import main; sys.exit(main(sys.argv[1:]))"


def store_overhead(n_points: int = 30) -> dict:
    """Compute time of N=1024 points vs the time to commit their results (same result dicts)."""
    points = [Point(seq_len=1024, head_dim=64, heads=1, format="bf16", policy=pol, seed=s, block_q=64, block_k=64)
              for s in range(n_points // 2) for pol in ("uniform", "fa2")]
    t0 = time.perf_counter()
    results = [run_point(p.config()) for p in points]
    compute = (time.perf_counter() - t0) / len(points)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        store.bind_spec(name="bench", spec_hash="0", canonical={}, source="bench")
        store.plan((p.key, p.kind, ("g",), p.config()) for p in points)
        run = store.begin_run(command="bench", n_todo=len(points), executor="local", jobs=1)
        t0 = time.perf_counter()
        for r in results:
            store.write(r, run)
        write = (time.perf_counter() - t0) / len(points)
        store.close()
    return {"point_compute_s": compute, "store_write_s": write, "store_overhead_pct": 100 * write / compute}


def jobs_speedup(out_root: Path) -> dict:
    spec = spec_from_dict({
        "name": "bench-jobs", "record": ["flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline"],
        "defaults": {"heads": 1, "head_dim": 64, "block_q": 64, "block_k": 64},
        "axes": {"format": ["bf16", "fp16", "e5m7"], "policy": ["uniform", "fa2"], "seq_len": [2048],
                 "seed": list(range(6))},
    })
    out = {}
    for jobs in (1, 2):
        memo.clear()  # each run computes its own golden values (forked workers would inherit the driver's)
        t0 = time.perf_counter()
        summary = run_sweep(spec, SweepOptions(out=out_root / f"jobs{jobs}", jobs=jobs, quiet=True))
        out[f"jobs{jobs}_s"] = time.perf_counter() - t0
        out["points"] = summary.planned
    out["speedup"] = out["jobs1_s"] / out["jobs2_s"]
    out["ceiling"] = ceiling()
    out["speedup_of_ceiling"] = out["speedup"] / out["ceiling"]
    # What the pool pays once: spawning workers that import torch and attnum.
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, attnum.sweep.point_runner"], check=True)
    out["worker_start_s"] = time.perf_counter() - t0
    return out


def _fixed_work(_: int = 0) -> float:
    """About a second of single-threaded float64 GEMMs (what golden and baseline points are made of)."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(512, 512, dtype=torch.float64)
    t0 = time.perf_counter()
    for _ in range(60):
        a = torch.tanh(a @ a * 1e-3)
    return time.perf_counter() - t0


def ceiling() -> float:
    """Throughput of the fixed work in 2 forked processes at once over 1 process (2.0 on 2 free cores)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with ctx.Pool(2) as pool:
        pool.map(_fixed_work, range(2))  # start and warm both
        t0 = time.perf_counter()
        pool.map(_fixed_work, range(1))
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        pool.map(_fixed_work, range(2), chunksize=1)
        two = time.perf_counter() - t0
    return 2 * one / two


def quick_profile(out_root: Path, jobs: int) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CLI, "reproduce", "--profile", "quick", "--out",
                           str(out_root / "quick"), "--jobs", str(jobs), "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    line = next(ln for ln in proc.stdout.splitlines() if ln.endswith("s") and "points (" in ln)
    n_points = int(line.split()[0])
    return {"quick_wall_s": wall, "quick_points": n_points, "quick_points_per_s": n_points / wall,
            "quick_summary": line}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-quick", action="store_true", help="skip the full quick-profile run")
    ap.add_argument("--jobs", type=int, default=2, help="--jobs for the quick profile")
    args = ap.parse_args()
    from bench_core import cpu_model

    result = {"cpu": cpu_model(), "cpus": os.cpu_count(), "loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        result.update(store_overhead())
        result.update(jobs_speedup(Path(tmp)))
        if not args.no_quick:
            result.update(quick_profile(Path(tmp), args.jobs))
    result["loadavg_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
