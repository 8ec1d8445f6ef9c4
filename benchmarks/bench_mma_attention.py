"""Emulated attention with tensor-core matmuls (``mma=sm90``) against the same policy without them (issue 29).

    python benchmarks/bench_mma_attention.py [--quick] [--reps 3] [--policy fa2:bf16]

CPU, the caller's intra-op threads (torch's BLAS and attnum's MMA kernel both use them), B=1 H=8 d=64,
N=4096 (--quick: N=1024), flash with Bc=128. Times
(minimum over ``--reps`` interleaved rounds) of ``POLICY`` and ``POLICY,mma=sm90``, their ratio against the
target (<= 10x), and where the time goes: products of the same shapes run alone through
:func:`attnum.mma.matmul` (Q K^T and a P V per tile, with P uniform in [0, 1): dense, every
product nonzero, so not the same work as a softmax's P) against the same products by torch's BLAS (the
floor of exact emulation: the policy without mma is little more than these).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from bench_core import cpu_model

from attnum import flash_attention
from attnum import mma


def timed(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--policy", default="fa2:bf16")
    args = ap.parse_args()
    B, H, N, d, Bc = 1, 8, (1024 if args.quick else 4096), 64, 128
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, N, d, generator=g).to(torch.bfloat16).float() for _ in range(3))
    plain, tc = args.policy, f"{args.policy},mma=sm90"
    flash_attention(q, k, v, policy=tc, block_q=128, block_k=Bc)  # compile the kernels once
    times = {plain: float("inf"), tc: float("inf")}
    for _ in range(args.reps):  # interleaved rounds: a busy machine slows both alike
        for pol in times:
            times[pol] = min(times[pol], timed(lambda p=pol: flash_attention(q, k, v, policy=p, block_q=128,
                                                                              block_k=Bc), 1))
    ratio = times[tc] / times[plain]
    print(f"CPU: {cpu_model()}; load average before: {os.getloadavg()[0]:.1f}")
    print(f"threads={torch.get_num_threads()} B={B} H={H} N={N} d={d} Bc={Bc}")
    print(f"{plain:<24} {times[plain]:8.2f} s")
    print(f"{tc:<24} {times[tc]:8.2f} s   ratio {ratio:.2f}x (target <= 10x: {'met' if ratio <= 10 else 'NOT met'})")
    # Where the time goes: the two products of one call, per tile, alone.
    qb, kb, vb = q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)
    p = torch.rand(B, H, N, Bc, generator=g).to(torch.bfloat16)

    def products_mma():
        for j0 in range(0, N, Bc):
            mma.matmul(qb, kb[:, :, j0:j0 + Bc].transpose(-1, -2), arch="sm90")
            mma.matmul(p, vb[:, :, j0:j0 + Bc], arch="sm90")

    def products_blas():
        for j0 in range(0, N, Bc):
            q @ k[:, :, j0:j0 + Bc].transpose(-1, -2)
            p.float() @ v[:, :, j0:j0 + Bc]

    t_mma, t_blas = timed(products_mma, args.reps), timed(products_blas, args.reps)
    macs = 2 * B * H * N * N * d
    print(f"products of the call's shapes alone (dense P): mma.matmul {t_mma:.2f} s "
          f"({macs / t_mma / 1e6:.0f} M products/s), BLAS fp32 {t_blas:.3f} s")


if __name__ == "__main__":
    main()
