"""Overhead of the tie detector and the signed metrics on one compare point.

Target (issue 12): together they add <= 10% to ``run_compare``. In one process, interleaved, the
median of ``--reps`` repetitions of:

- ``point``: :func:`attnum.studies.paper.compare.run_compare` as it is (its ``deviation`` already
  computes the signed metrics mean_signed, mean_magnitude and bias for its three pairs);
- ``signed``: the work those signed metrics add to ``deviation`` (which forms e = x - ref for its
  unsigned metrics anyway): mean(e) and mean(e * sign(ref)) on the same three pairs; the point
  without them costs point - signed;
- ``detect``: :func:`attnum.attention.ties.score_ties_by` on the point's inputs: per full row and per
  KV tile (flash's view) from one formation of the scores, as a point would record them.

Printed: overhead = (point + detect) / (point - signed) - 1, per configuration. Exit status 1 if
any is over target.

    python benchmarks/bench_bias.py [--reps 5] [--seq-len 1024] [--cores 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

TARGET = 0.10


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(cfg, reps: int) -> dict[str, float]:
    """Median seconds of point, signed, detect and tiles (see the module docstring) at ``cfg``."""
    from attnum import baseline_attention, flash_attention, golden_attention
    from attnum.attention.ties import score_ties, score_ties_by
    from attnum.numerics.metrics import signed_error
    from attnum.studies.paper.compare import compare_inputs, run_compare

    pol, (q, k, v) = compare_inputs(cfg)
    Bc = cfg.tiles().Bc
    common = dict(is_causal=cfg.causal)
    gold = golden_attention(q, k, v, **common)
    flash = flash_attention(q, k, v, policy=pol, block_k=Bc, **common)
    base = baseline_attention(q, k, v, policy=pol, **common)
    # deviation forms e = x - ref for its unsigned metrics anyway; the signed ones add mean(e) and
    # mean(e * sign(ref)) (their ratio is a float division)
    errors = [(signed_error(x, ref).flatten(), ref.double().flatten()) for x, ref in
              ((flash, gold), (base, gold), (flash, base))]

    def signed():
        for e, ref in errors:
            float(e.mean()), float((e * ref.sign()).mean())

    jobs = {
        "point": lambda: run_compare(cfg),
        "signed": signed,
        "detect": lambda: score_ties(q, k, policy=pol, **common),  # the detector: full rows
        "tiles": lambda: score_ties_by(q, k, blocks=(None, Bc), policy=pol, **common),  # + flash's tiles
    }
    run_compare(cfg)  # warm up
    t: dict[str, list[float]] = {key: [] for key in jobs}
    for _ in range(reps):  # interleaved, so load changes hit every measurement alike
        for key, fn in jobs.items():
            t[key].append(_time(fn))
    m = {key: statistics.median(vals) for key, vals in t.items()}
    m["near_fraction"] = score_ties(q, k, policy=pol, **common).near_fraction
    return m


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--cores", type=int, default=2)
    args = p.parse_args(argv)
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.cores])
    import torch

    from attnum.studies.paper.compare import CompareConfig

    worst = 0.0
    for policy, dist, causal in (("uniform", "normal", False), ("fa2", "ties", True), ("uniform", "lowrank", True)):
        cfg = CompareConfig(policy=policy, format="bf16", seq_len=args.seq_len, dist=dist, causal=causal)
        m = measure(cfg, args.reps)
        base = m["point"] - m["signed"]
        overhead = (m["point"] + m["detect"]) / base - 1
        worst = max(worst, overhead)
        print(f"{policy}:bf16 dist={dist:<8} causal={causal!s:<5} N={args.seq_len}: point {m['point']:.3f} s, "
              f"signed metrics {m['signed']:.4f} s, detector {m['detect']:.4f} s -> overhead "
              f"{100 * overhead:.1f}% (rows with ties: {100 * m['near_fraction']:.1f}%); rows + tiles "
              f"({m['tiles']:.4f} s) would be {100 * ((m['point'] + m['tiles']) / base - 1):.1f}%", flush=True)
    print(f"worst overhead {100 * worst:.1f}% (target <= {100 * TARGET:.0f}%); torch threads "
          f"{torch.get_num_threads()}")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
