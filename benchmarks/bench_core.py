"""Core speed targets (issue: core numerics engine), each a ratio against a baseline timed in the same run.

    python benchmarks/bench_core.py [--quick]

CPU, B=1, H=8, N=4096, d=64 unless --quick. Prints one line per target: times, ratio, target, verdict.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnum import flash_attention, golden_attention, round_to
from attnum.formats import get_format
from attnum.rounding import round_generic


def timeit(fn, reps: int = 5) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sdpa_flash(q, k, v):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v)


def report(name: str, t: float, base_name: str, t_base: float, target: float, higher_is_better=False) -> bool:
    ratio = t / t_base
    ok = ratio >= target if higher_is_better else ratio <= target
    rel = ">=" if higher_is_better else "<="
    print(f"{name:<44} {t * 1e3:9.1f} ms | {base_name:<34} {t_base * 1e3:9.1f} ms | "
          f"ratio {ratio:6.2f} (target {rel} {target}) {'MET' if ok else 'MISSED'}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="N=1024 and 10^6 values (smoke run)")
    args = ap.parse_args()
    N = 1024 if args.quick else 4096
    n_round = 10**6 if args.quick else 10**7
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, B=1 H=8 N={N} d=64")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, N, 64, generator=g) for _ in range(3))
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    results = []

    t_sdpa32 = timeit(lambda: sdpa_flash(q, k, v))
    t_sdpa16 = timeit(lambda: sdpa_flash(qb, kb, vb))
    results.append(report("flash_attention policy=fp32", timeit(lambda: flash_attention(q, k, v, policy="fp32", block_k=512)),
                          "torch CPU flash SDPA fp32", t_sdpa32, 2))
    results.append(report("flash_attention policy=fa2:bf16",
                          timeit(lambda: flash_attention(qb, kb, vb, policy="fa2:bf16", block_k=512)),
                          "torch CPU flash SDPA bf16", t_sdpa16, 4))
    results.append(report("flash_attention policy=uniform:e4m3fn",
                          timeit(lambda: flash_attention(q, k, v, policy="uniform:e4m3fn", block_k=512), reps=1),
                          "torch CPU flash SDPA fp32", t_sdpa32, 8))

    qd, kd, vd = (x.double() for x in (q, k, v))
    t_gold = timeit(lambda: golden_attention(qd, kd, vd), reps=1)
    flops_gold = 4 * 8 * N * N * 64  # QK^T and PV, 2 flops per multiply-add
    a = torch.randn(2048, 2048, dtype=torch.float64)
    t_gemm = timeit(lambda: a @ a)
    rate_gemm = 2 * 2048**3 / t_gemm
    rate_gold = flops_gold / t_gold
    print(f"{'golden_attention fp64':<44} {rate_gold / 1e9:9.1f} GF/s | {'fp64 GEMM 2048^3':<34} "
          f"{rate_gemm / 1e9:9.1f} GF/s | fraction {rate_gold / rate_gemm:5.2f} (target >= 0.5) "
          f"{'MET' if rate_gold >= 0.5 * rate_gemm else 'MISSED'}")
    results.append(rate_gold >= 0.5 * rate_gemm)

    x = torch.randn(n_round) * 100
    t_cast = timeit(lambda: x.to(torch.bfloat16).float())
    results.append(report(f"round_to(bf16), {n_round:.0e} float32", timeit(lambda: round_to(x, "bf16")),
                          "x.to(bfloat16).float()", t_cast, 3))
    e4 = get_format("e4m3fn")
    results.append(report(f"round_generic(e4m3fn), {n_round:.0e} float32", timeit(lambda: round_generic(x, e4)),
                          "x.to(bfloat16).float()", t_cast, 15))
    print(f"{sum(results)}/{len(results)} targets met")


if __name__ == "__main__":
    main()
