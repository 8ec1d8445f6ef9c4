"""Wall time of ``attnum diverge --workload digits --profile quick`` (every run of every seed, curves, report).

Target (issues 5 and 9): <= 15 minutes on 2 CPU cores, with the default pairing (flash and baseline
both at bf16) and three seeds. A fresh ``--out`` is used each time (finished runs would be reused). ``--cores 2`` pins this process to two cores
(os.sched_setaffinity) so a bigger machine measures the same budget. Exit status 1 if over target.

    python benchmarks/bench_diverge.py [--workload digits] [--cores 2] [--out runs/bench_diverge]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

TARGET_S = 15 * 60


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="digits")
    p.add_argument("--attention", default=None, help="default: DivergeConfig's (flash:uniform:bf16)")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("runs/bench_diverge"))
    args = p.parse_args(argv)
    if args.cores and hasattr(os, "sched_setaffinity"):
        available = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, available[: args.cores])
    import shutil

    from attnum.studies.training.diverge import DivergeConfig, run_diverge

    shutil.rmtree(args.out, ignore_errors=True)
    extra = {"attention": args.attention} if args.attention else {}
    t0 = time.perf_counter()
    cfg = DivergeConfig(workload=args.workload, profile="quick", out=args.out, **extra)
    summary = run_diverge(cfg)
    wall = time.perf_counter() - t0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"quick profile, workload={args.workload}, attention={cfg.attention}, baseline={cfg.baseline}, "
          f"seeds={cfg.seeds}, {cores} cores, load average {os.getloadavg()[0]:.1f}")
    for name, r in summary["runs"].items():
        print(f"  run {name:12s} {r['wall_s']:7.1f} s  final loss {r['losses'][-1]:.4f}")
    for line in summary["headline"]["lines"]:
        print(f"  {line}")
    print(f"  {summary['headline']['sentence']}")
    ok = wall <= TARGET_S
    print(f"wall time {wall:.1f} s (target <= {TARGET_S} s): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
