"""Decode speed targets (issue 10), each a ratio against a baseline timed in the same run.

    python benchmarks/bench_decode.py [--quick] [--threads N]

1. Decode at B = 8, H = 32, G = 8, S = 32768, d = 128, bf16, ``fa2`` policy, 8 splits (flash-decoding
   emulation: partials by the core's flash forward, merged in fp32) <= 3x torch SDPA decode in bf16 on
   CPU (``F.scaled_dot_product_attention`` with ``enable_gqa``, one query per sequence).
2. Paged decode, page size 16, tiles of 128 keys (8 pages per tile) <= 1.5x the contiguous emulation at
   the same tiles and splits (the gather's cost); the same with the kernel tiling by page (Bc = 16) is
   printed beside it against contiguous decode at Bc = 16.

``--quick``: S = 4096 (a smoke run). Prints one line per target: times, ratio, target, verdict.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from attnum.attention.serving.decode import decode_attention
from attnum.attention.serving.paged import paged_decode_attention, to_pages


def timeit(fn, reps: int = 3) -> float:
    fn()  # warm-up (and the page faults of first use)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def report(name: str, t: float, base_name: str, t_base: float, target: float) -> bool:
    ratio = t / t_base
    ok = ratio <= target
    print(f"{name:<48} {t * 1e3:9.1f} ms | {base_name:<40} {t_base * 1e3:9.1f} ms | "
          f"ratio {ratio:5.2f} (target <= {target}) {'MET' if ok else 'MISSED'}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="S = 4096 instead of 32768")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    B, H, G, S, d = 8, 32, 8, (4096 if args.quick else 32768), 128
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, B={B} H={H} G={G} S={S} d={d} bf16")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, 1, d, generator=g).bfloat16()
    k = torch.randn(B, G, S, d, generator=g).bfloat16()
    v = torch.randn(B, G, S, d, generator=g).bfloat16()
    results = []

    t_sdpa = timeit(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    t_dec = timeit(lambda: decode_attention(q, k, v, policy="fa2:bf16", num_splits=8))
    results.append(report("decode fa2:bf16, 8 splits (Bc=128)", t_dec, "torch SDPA decode bf16", t_sdpa, 3))

    kp, table = to_pages(k, 16)
    vp, _ = to_pages(v, 16)
    lens = torch.full((B,), S)
    kw = dict(policy="fa2:bf16", num_splits=8)
    t_paged = timeit(lambda: paged_decode_attention(q, kp, vp, block_table=table, cache_seqlens=lens, block_k=128,
                                                    **kw))
    results.append(report("paged decode P=16, tiles of 128 keys", t_paged, "contiguous decode, same tiles",
                          t_dec, 1.5))
    t_by_page = timeit(lambda: paged_decode_attention(q, kp, vp, block_table=table, cache_seqlens=lens, **kw), reps=1)
    t_c16 = timeit(lambda: decode_attention(q, k, v, block_k=16, **kw), reps=1)
    results.append(report("paged decode P=16, tiled by page (Bc=16)", t_by_page, "contiguous decode, Bc=16",
                          t_c16, 1.5))
    print(f"{sum(results)}/{len(results)} targets met")


if __name__ == "__main__":
    main()
