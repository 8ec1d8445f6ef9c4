"""Core speed targets, each a ratio against a baseline timed in the same run (issues 1 and 21).

    python benchmarks/bench_core.py [--quick] [--reps 5]

CPU, 1 intra-op thread, B=1 H=8 d=64, N=4096 and N=512 (--quick: N=1024 and 512). Prints the CPU model
(with or without AMX, from /proc/cpuinfo), then one line per target: times (minimum over ``--reps``
interleaved rounds, each timing consecutive calls of one function in its steady state), ratio, target,
verdict. Also the unfused reference (ATTNUM_JIT=0) beside each emulated line; the floor of an fp32
call, its two matmuls and torch's exp per tile and nothing else (what no fusion removes while the
emulation's exp is torch's); and round_to from float64 against ml_dtypes' cast (0 disagreements required).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnum import flash_attention, golden_attention, round_to
from attnum.numerics import jit


def cpu_model() -> str:
    """The CPU's model name and whether it has AMX (amx_tile/amx_bf16 flags) and AVX-512."""
    name, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name in ("unknown", "x86_64", ""):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    amx = "with AMX" if {"amx_tile", "amx_bf16"} & flags else "without AMX"
    avx = "AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2")
    return f"{name}, {os.cpu_count()} CPUs, {amx}, {avx}, torch capability {torch.backends.cpu.get_cpu_capability()}"


def best_of(fns: dict, reps: int, runs: int = 3) -> dict:
    """Minimum wall time of each function over ``reps`` interleaved rounds (after one warm-up each). A
    round times ``runs`` consecutive calls of one function and keeps the later ones: each function is
    timed in its own steady state, not in the spin-wait a previous function's OpenMP team leaves
    behind (libgomp's threads spin for a while after a parallel region and take the cores)."""
    for fn in fns.values():
        fn()
    times = {k: float("inf") for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            for i in range(runs):
                t0 = time.perf_counter()
                fn()
                if i or runs == 1:
                    times[k] = min(times[k], time.perf_counter() - t0)
    return times


def sdpa(q, k, v):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v)


def floor(q, k, v, block_k: int):
    """The part of an emulated fp32/bf16 flash call no fusion removes: per row block and key tile, the two
    matmuls at torch's GEMM speed and torch's exp over the score tile (its bits are the reference's exp),
    nothing else; the same row blocks as the emulation (flash_forward.row_block)."""
    from attnum.attention.flash_forward import row_block

    B, H, N, d = q.shape
    S = k.shape[-2]
    rows = row_block(B, H, N, block_k, q.device)
    buf = torch.empty(B, H, rows, block_k)
    for i0 in range(0, N, rows):
        qi = q[:, :, i0:i0 + rows]
        for j0 in range(0, S, block_k):
            s = torch.matmul(qi, k[:, :, j0:j0 + block_k].transpose(-1, -2), out=buf[:, :, :qi.shape[2]])
            s.exp_()
            s @ v[:, :, j0:j0 + block_k]


def unfused(fn):
    def run():
        os.environ["ATTNUM_JIT"] = "0"
        try:
            return fn()
        finally:
            os.environ.pop("ATTNUM_JIT")
    return run


def line(name, t, base_name, t_base, target) -> bool:
    ratio = t / t_base
    ok = ratio <= target
    print(f"{name:<46} {t * 1e3:9.1f} ms | {base_name:<26} {t_base * 1e3:9.1f} ms | ratio {ratio:6.2f} "
          f"(target <= {target}) {'MET' if ok else 'MISSED'}")
    return ok


def attention_targets(N: int, reps: int, targets: dict[str, float]) -> list[bool]:
    g = torch.Generator().manual_seed(N)
    q, k, v = (torch.randn(1, 8, N, 64, generator=g) for _ in range(3))
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    cases = {"fp32": (q, k, v, "sdpa32"), "fa2:bf16": (qb, kb, vb, "sdpa16"), "uniform:e4m3fn": (q, k, v, "sdpa32")}
    fns = {"sdpa32": lambda: sdpa(q, k, v), "sdpa16": lambda: sdpa(qb, kb, vb)}
    for pol, (a, b, c, _) in cases.items():
        fns[pol] = lambda a=a, b=b, c=c, pol=pol: flash_attention(a, b, c, policy=pol, block_k=512)
        fns[pol + " unfused"] = unfused(fns[pol])
    fns["floor"] = lambda: floor(q, k, v, 512)
    t = best_of(fns, reps, runs=2)
    names = {"sdpa32": "torch SDPA flash fp32", "sdpa16": "torch SDPA flash bf16"}
    out = []
    for pol, (*_, base) in cases.items():
        out.append(line(f"N={N} flash_attention policy={pol}", t[pol], names[base], t[base], targets[pol]))
        print(f"{'   (unfused reference, ATTNUM_JIT=0)':<46} {t[pol + ' unfused'] * 1e3:9.1f} ms | fused speedup "
              f"{t[pol + ' unfused'] / t[pol]:.2f}x")
    print(f"{'   floor: 2 fp32 matmuls + torch exp per tile':<46} {t['floor'] * 1e3:9.1f} ms | "
          f"{t['floor'] / t['sdpa32']:.2f}x torch SDPA fp32; fp32 policy / floor {t['fp32'] / t['floor']:.2f}x")
    return out


def rounding_targets(n: int, reps: int) -> list[bool]:
    import ml_dtypes

    x = torch.from_numpy(np.random.default_rng(0).standard_normal(n) * 100.0)
    xn = x.numpy()
    out = []
    for name, dt in (("bf16", ml_dtypes.bfloat16), ("fp16", np.float16), ("e4m3fn", ml_dtypes.float8_e4m3fn),
                     ("e5m2", ml_dtypes.float8_e5m2)):
        t = best_of({"attnum": lambda: round_to(x, name), "ml": lambda: xn.astype(dt),
                     "ml_rt": lambda: xn.astype(dt).astype(np.float64)}, reps)
        got, want = round_to(x, name).numpy(), xn.astype(dt).astype(np.float64)
        nan = np.isnan(want)
        bad = int(((got != want) & ~nan).sum() + (np.isnan(got) != nan).sum())
        ok = line(f"round_to({name}) {n:.0e} float64", t["attnum"], "ml_dtypes astype", t["ml"], 1.2) and bad == 0
        print(f"{'   disagreements with ml_dtypes':<46} {bad:9d}    | ml_dtypes round trip {t['ml_rt'] * 1e3:.1f} ms")
        out.append(ok)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="N=1024 instead of 4096, 10^6 values (smoke run)")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    big = 1024 if args.quick else 4096
    print(f"CPU: {cpu_model()}")
    print(f"torch {torch.__version__}, 1 thread, compiled kernels {'on' if jit.enabled() else 'OFF'}, "
          f"load average {os.getloadavg()[0]:.2f}, B=1 H=8 d=64, block_k=512")
    results = attention_targets(big, args.reps, {"fp32": 1.3, "fa2:bf16": 1.5, "uniform:e4m3fn": 2.0})
    results += attention_targets(512, args.reps, {"fp32": 2.0, "fa2:bf16": 2.0, "uniform:e4m3fn": 2.0})
    threads = os.cpu_count() or 1
    if threads > 1:
        torch.set_num_threads(threads)
        print(f"-- N=512 with {threads} threads")
        results += attention_targets(512, args.reps, {"fp32": 2.0, "fa2:bf16": 2.0, "uniform:e4m3fn": 2.0})
        torch.set_num_threads(1)
    results += rounding_targets(10**6 if args.quick else 2 * 10**6, args.reps)
    qd, kd, vd = (torch.randn(1, 8, big, 64, dtype=torch.float64) for _ in range(3))
    a = torch.randn(2048, 2048, dtype=torch.float64)
    t = best_of({"gold": lambda: golden_attention(qd, kd, vd), "gemm": lambda: a @ a}, max(1, args.reps // 2), runs=1)
    frac = (4 * 8 * big * big * 64 / t["gold"]) / (2 * 2048**3 / t["gemm"])
    print(f"{'golden_attention fp64 GF/s vs fp64 GEMM':<46} fraction {frac:5.2f} (target >= 0.5) "
          f"{'MET' if frac >= 0.5 else 'MISSED'}")
    results.append(frac >= 0.5)
    print(f"{sum(results)}/{len(results)} targets met")


if __name__ == "__main__":
    main()
