"""Speed target: the default probe set for one dtype on a pure-PyTorch target in <= 60 s on 2 cores.

    python benchmarks/bench_audit.py [--target torch-sdpa-math] [--dtype bf16] [--threads N]

Prints the time and margin (error / bound) of every probe, the total, torch's CPU capability, and
the ratio to the 60 s target (< 1 is within it).
``--threads`` sets torch's intra-op threads (default: torch's own choice, i.e. the cores).
"""

from __future__ import annotations

import argparse
import time

import torch

from attnum.audit.config import AuditConfig
from attnum.audit.report import margin
from attnum.audit.runner import run_audit

TARGET_S = 60.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="torch-sdpa-math")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    report = run_audit(AuditConfig(target=args.target, dtypes=args.dtype))
    total = time.perf_counter() - t0
    print(f"{'probe':24s} {'verdict':11s} {'margin':>7s} seconds")
    for r in sorted(report.results, key=lambda r: -r.seconds):
        print(f"{r.name:24s} {r.status:11s} {margin(r.ratio):>7s} {r.seconds:7.2f}")
    print(f"target={args.target} dtype={args.dtype} threads={torch.get_num_threads()} "
          f"cpu_capability={report.environment.get('cpu_capability')} probes={len(report.results)} "
          f"total={total:.1f}s target={TARGET_S:.0f}s ratio={total / TARGET_S:.3f} passed={report.passed}")


if __name__ == "__main__":
    main()
