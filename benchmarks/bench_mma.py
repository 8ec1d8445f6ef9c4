"""attnum.numerics.mma.matmul against mmasim's own operation on the same product (issue 29: at least 50x).

    python benchmarks/bench_mma.py [--rows 256] [--reps 5] [--full]

(1024 x 64) @ (64 x 1024) bf16 on sm90 (Hopper wgmma, fp32 accumulator), c = 0. attnum: the minimum over
``--reps`` calls (after one warm-up that compiles). mmasim 2.1.1: ``WGMMA("Hopper", "m64n256k16.f32.bf16.bf16")``
called once on (rows x 64) @ (64 x 1024) (its fastest form: one call expands every output's K vector and
runs the groups of 16 in order, the same arithmetic as 4 chained k16 instructions), at torch's default
thread count and at one thread; its cost is linear in the rows (it materialises (rows, 1024, 64) float64
tensors), so the slice's time is scaled to 1024 rows, and the output says so (``--full``: all 1024 rows,
several GB of memory). The ratio uses the faster of the two mmasim timings. The slice's bits are compared
(0 mismatches required). Prints the CPU model and the load average (the ratio is of two timings in this
run, but a loaded machine slows the two unequally).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from bench_core import cpu_model

from attnum.numerics import mma


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=256, help="rows of A that mmasim runs (scaled to 1024)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--full", action="store_true", help="mmasim on all 1024 rows (no scaling)")
    args = ap.parse_args()
    from mmasim.nv_ptx import WGMMA

    M, K, N = 1024, 64, 1024
    rows = M if args.full else args.rows
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=gen).bfloat16()
    b = torch.randn(K, N, generator=gen).bfloat16()
    c = torch.zeros(M, N)
    print(f"CPU: {cpu_model()}; load average before: {os.getloadavg()[0]:.1f}")
    print(f"product: ({M} x {K}) @ ({K} x {N}) bf16, sm90 (wgmma m64nNk16, L = 16, F = 25, fp32 RZ)")

    mma.matmul(a[:2], b, arch="sm90")  # compile (cached after the first run)
    t_attnum = float("inf")
    for _ in range(args.reps):
        t0 = time.perf_counter()
        got = mma.matmul(a, b, c, arch="sm90")
        t_attnum = min(t_attnum, time.perf_counter() - t0)

    op = WGMMA("Hopper", "m64n256k16.f32.bf16.bf16")
    timings = {}
    threads = torch.get_num_threads()
    for n in dict.fromkeys((threads, 1)):
        torch.set_num_threads(n)
        t0 = time.perf_counter()
        want = op(a[:rows], b, c[:rows])
        timings[n] = time.perf_counter() - t0
    torch.set_num_threads(threads)
    bad = int((got[:rows].view(torch.int32) != want.view(torch.int32)).sum())

    scale = M / rows
    t_mmasim = min(timings.values()) * scale
    for n, t in timings.items():
        how = "all rows" if rows == M else f"{rows}-row slice, x{scale:g} to {M} rows"
        print(f"mmasim {n} thread(s): {t:.3f} s ({how}) -> {t * scale:.2f} s")
    print(f"attnum.numerics.mma.matmul: {t_attnum:.3f} s (min of {args.reps}; numba, one thread)")
    print(f"mismatches on the {rows} rows mmasim ran: {bad} of {rows * N}")
    ratio = t_mmasim / t_attnum
    print(f"ratio mmasim / attnum = {ratio:.0f}x (target >= 50x): {'met' if ratio >= 50 and bad == 0 else 'NOT met'}")


if __name__ == "__main__":
    main()
