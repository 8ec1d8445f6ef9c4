"""attnum.wasserstein_distance vs scipy.stats.wasserstein_distance on two 10^7-element float32 tensors.

Target (issue 5): >= 10x faster than scipy in the same run, equal within 1e-9 relative.
Data: a = 0.02 N(0,1), b = a + 1e-3 N(0,1), seed 0.
Times are the median of ``--reps`` runs (time.perf_counter). Exit status 1 if a target is missed.

    python benchmarks/bench_wasserstein.py [--n 10000000] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch


def _median_time(fn, reps: int) -> tuple[float, float]:
    times, value = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    from scipy.stats import wasserstein_distance as scipy_w1

    from attnum.numerics.metrics import wasserstein_distance

    rng = np.random.default_rng(0)
    a = rng.standard_normal(args.n, dtype=np.float32) * np.float32(0.02)
    b = a + rng.standard_normal(args.n, dtype=np.float32) * np.float32(1e-3)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    t_attnum, w_attnum = _median_time(lambda: wasserstein_distance(ta, tb), args.reps)
    t_scipy, w_scipy = _median_time(lambda: scipy_w1(a, b), args.reps)
    ratio = t_scipy / t_attnum
    rel = abs(w_attnum - w_scipy) / abs(w_scipy)
    print(f"n = {args.n:,} float32 per side, median of {args.reps}")
    print(f"attnum.wasserstein_distance: {t_attnum:8.3f} s  value {w_attnum!r}")
    print(f"scipy wasserstein_distance : {t_scipy:8.3f} s  value {w_scipy!r}")
    print(f"speed-up scipy/attnum      : {ratio:8.1f}x  (target >= 10x)")
    print(f"relative difference        : {rel:.3e}  (target <= 1e-9)")
    ok = ratio >= 10 and rel <= 1e-9
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
