"""The FP8 P V accumulation error against the number of keys, under Hopper's wgmma (docs/tensor-cores.md).

    python scripts/fp8_pv_accumulation.py [--rows 64] [--dv 64] [--seed 0]

P (rows x n) is FlashAttention-3's FP8 P: 256 * exp(s - max s) of standard-normal scores, cast to e4m3;
V (n x dv) is e4m3 of |N(0, 1)| (positive) or N(0, 1) (mixed sign). For n = 1k .. 32k keys it computes
P V with :func:`attnum.mma.matmul`:
- ``sm90 one level``: the whole n onto one accumulator (FA3: O is the wgmma accumulator for every tile;
  Triton's default ``max_num_imprecise_acc`` 2**30), the 13-bit FP8 wgmma accumulation;
- ``sm90 two level``: every 128 keys from a zero accumulator, each partial added into an fp32 buffer with
  one round-to-nearest addition (SageAttention2's two-level accumulation; DeepSeek-V3's 128-element
  promotion; Triton's ``max_num_imprecise_acc=128``);
- ``sm100``: Blackwell's tcgen05 FP8 (F = 25, full fp32 output), one level;
against the float64 product. Prints, per n and V sign: the mean signed relative error of the outputs
(positive V: how one-sided the loss is) and the normwise relative error ||O - O*|| / ||O*||.
"""

from __future__ import annotations

import argparse

import torch

from attnum import mma
from attnum.numerics.rounding import round_to

E4M3 = torch.float8_e4m3fn
KEYS = (1024, 2048, 4096, 8192, 16384, 32768)


def inputs(rows: int, n: int, dv: int, positive: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(rows, n, generator=g, dtype=torch.float64)
    p = round_to(256.0 * torch.exp(s - s.amax(-1, keepdim=True)), "e4m3fn", saturate=True).to(E4M3)
    v = torch.randn(n, dv, generator=g, dtype=torch.float64)
    v = (v.abs() if positive else v).to(E4M3)
    return p, v


def two_level(p: torch.Tensor, v: torch.Tensor, block: int = 128) -> torch.Tensor:
    acc = None
    for k0 in range(0, p.shape[-1], block):
        part = mma.matmul(p[:, k0:k0 + block], v[k0:k0 + block], arch="sm90").double()
        acc = part if acc is None else round_to(acc + part, "fp32")
    return acc


def errors(got: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    rel = ((got.double() - exact) / exact.abs().clamp_min(1e-300)).mean().item()
    norm = ((got.double() - exact).norm() / exact.norm()).item()
    return rel, norm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--dv", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"rows={args.rows} dv={args.dv} seed={args.seed}; mean signed relative error / normwise relative error")
    print(f"{'V':>8} {'keys':>6} {'sm90 one level':>24} {'sm90 two level (128)':>24} {'sm100 one level':>24}")
    for positive in (True, False):
        for n in KEYS:
            p, v = inputs(args.rows, n, args.dv, positive, args.seed)
            exact = p.double() @ v.double()
            cols = [errors(mma.matmul(p, v, arch="sm90"), exact), errors(two_level(p, v), exact),
                    errors(mma.matmul(p, v, arch="sm100"), exact)]
            print(f"{'positive' if positive else 'mixed':>8} {n:>6} " +
                  " ".join(f"{r:+.3e} / {nr:.2e}".rjust(24) for r, nr in cols), flush=True)


if __name__ == "__main__":
    main()
