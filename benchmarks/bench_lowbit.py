"""Speed of the SageAttention emulation against attnum's own ``fa2:bf16`` flash emulation.

Target (issue 22): the SageAttention emulation at B = 1, H = 8, N = S = 4096, d = 128 within 3x of
``flash_attention(policy="fa2:bf16")`` at the same shape. Both run in this process on the same inputs,
interleaved, median of ``--reps``; printed: each time and the ratio sage / fa2 per scheme, and the CPU.
Exit status 1 if a ratio is over target.

Also ``--exp2``: FA4's polynomial exp2 over every fp32 input of one binade (2**23 values), its max ulp
error against exact exp2 (the slow exhaustive check kept out of the test suite).

    python benchmarks/bench_lowbit.py [--reps 3] [--seq-len 4096] [--heads 8] [--schemes sage1,sage2] [--exp2]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

TARGET = 3.0


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--schemes", default="sage1,sage2")
    ap.add_argument("--exp2", action="store_true")
    args = ap.parse_args()
    import torch

    print(f"CPU: {_cpu()}; torch threads {torch.get_num_threads()}")
    if args.exp2:
        from attnum.attention.lowbit.exp2 import binade, exp2_poly, ulp_error

        x = binade(0)
        t0 = time.perf_counter()
        u = ulp_error(exp2_poly(x), x)
        print(f"exp2 poly3 over all {x.numel()} fp32 in [1, 2): max {float(u.max()):.1f} ulp, mean "
              f"{float(u.mean()):.1f} ulp ({time.perf_counter() - t0:.1f} s)")
    from attnum.attention import flash_attention

    g = torch.Generator().manual_seed(0)
    shape = (1, args.heads, args.seq_len, args.head_dim)
    q, k, v = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3))
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    times: dict[str, list[float]] = {"fa2:bf16": [], **{f"{s}:bf16": [] for s in schemes}}
    for _ in range(args.reps):
        for pol in times:
            t0 = time.perf_counter()
            flash_attention(q, k, v, policy=pol)
            times[pol].append(time.perf_counter() - t0)
    base = statistics.median(times["fa2:bf16"])
    print(f"B=1 H={args.heads} N=S={args.seq_len} d={args.head_dim}; median of {args.reps}")
    print(f"  fa2:bf16      {base:8.2f} s")
    worst = 0.0
    for pol in list(times)[1:]:
        t = statistics.median(times[pol])
        worst = max(worst, t / base)
        print(f"  {pol:12s}  {t:8.2f} s   ratio {t / base:.2f}x (target <= {TARGET}x)")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
