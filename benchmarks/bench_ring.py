"""Speed target: simulated ring attention with P = 8 at N = 8192, d = 64 in <= 2x the single-device
flash emulation (same policy, same tiles, same inputs).

    python benchmarks/bench_ring.py [--threads N] [--heads 1] [--policy fa2:bf16] [--repeat 2]

Prints the best-of-``repeat`` time of flash and of the ring for each layout, causal and not, and the
ratio to the 2x target (< 1 is within it). ``--threads`` sets torch's intra-op threads.
"""

from __future__ import annotations

import argparse
import time

import torch

from attnum import flash_attention
from attnum.attention.parallel.ring import ring_attention

TARGET = 2.0


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--policy", default="fa2:bf16")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--shards", type=int, default=8)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, args.heads, args.seq_len, 64, generator=g) for _ in range(3))
    print(f"threads={torch.get_num_threads()} N={args.seq_len} d=64 H={args.heads} P={args.shards} policy={args.policy}")
    for causal in (False, True):
        tf = _best(lambda c=causal: flash_attention(q, k, v, is_causal=c, policy=args.policy), args.repeat)
        for layout in ("contiguous", "zigzag"):
            tr = _best(lambda c=causal, lay=layout: ring_attention(q, k, v, is_causal=c, policy=args.policy,
                                                                   shards=args.shards, layout=lay), args.repeat)
            print(f"causal={causal!s:5} {layout:10s} flash {tf:6.2f} s  ring {tr:6.2f} s  ring/flash {tr / tf:5.2f}  "
                  f"target {TARGET:.0f}x  ratio {tr / tf / TARGET:.3f}")


if __name__ == "__main__":
    main()
