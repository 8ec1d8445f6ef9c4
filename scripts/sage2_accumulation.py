"""SageAttention2's P V accumulator under Hopper's FP8 wgmma, one level and two (docs/tensor-cores.md).

    python scripts/sage2_accumulation.py [--keys 4096] [--seed 0]

Q (B=1, H=2, N=64, d=64) of N(0, 0.01) (a flat softmax: every key counts), K of N(0, 1), V uniform in [0, 1)
(positive: the accumulation loss is one-sided), against the float64 golden: RMSE and mean signed error of
``sage2:bf16`` with its P V accumulator as attnum modelled it before (``fp22``: e8m13 rounded to nearest
every 32 products) and as Hopper's wgmma (``pv_acc=sm90``: :func:`attnum.mma.matmul`), each with
SageAttention2's two-level accumulation (every 64-key tile from zero, added into fp32) and without.
"""

from __future__ import annotations

import argparse

import torch

from attnum.attention.flash import flash_attention
from attnum.attention.golden import golden_attention
from attnum.numerics.metrics import deviation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(args.seed)
    q = torch.randn(1, 2, 64, 64, generator=g, dtype=torch.float64) * 0.1
    k = torch.randn(1, 2, args.keys, 64, generator=g, dtype=torch.float64)
    v = torch.rand(1, 2, args.keys, 64, generator=g, dtype=torch.float64)
    gold = golden_attention(q, k, v)
    print(f"keys={args.keys} seed={args.seed}")
    for spec in ("sage2:bf16", "sage2:bf16,two_level=false", "sage2:bf16,pv_acc=sm90",
                 "sage2:bf16,pv_acc=sm90,two_level=false", "sage2:bf16,pv_acc=fp32,two_level=false"):
        d = deviation(flash_attention(q, k, v, policy=spec), gold)
        print(f"{spec:42s} rmse {d['rmse']:.3e}  mean signed {d['mean_signed']:+.3e}", flush=True)


if __name__ == "__main__":
    main()
