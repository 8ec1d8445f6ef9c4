"""The CUDA path of golden, baseline, flash and decode: checked against the CPU results, timed against torch's CUDA SDPA.

    python benchmarks/bench_cuda.py                  # on a machine with a GPU (benchmarks/gpu_check.sh runs it)
    python benchmarks/bench_cuda.py --device cpu --quick   # the same script on the CPU alone (a dry run)

Checks (one JSON line each, then a summary; exit 1 when a check fails, 0 when all pass, 3 when CUDA is absent):

- golden (float64) on the device vs on the CPU: max |diff| <= S * 2**-52 * max |O| (float64 sums in
  another order);
- baseline, flash (fa2, fa1) and split-KV decode under fp32, fa2:bf16 and uniform:e4m3fn: the device's
  fp32 matmuls sum in another order than the CPU's BLAS, so bits may differ; each side's RMSE against
  the float64 golden must agree within a factor 1.5 (``rmse_ratio``); the share of bit-identical
  elements and the largest difference in units of the output format's ulp at 1 are reported;
- timing (1 warm-up, minimum of ``--reps``): flash_attention on the device vs torch SDPA on the device
  (bf16 for fa2:bf16, fp32 otherwise) at B=1 H=8 d=64, N=``--seq-len``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

from attnum import flash_attention, golden_attention
from attnum.attention.baseline import baseline_attention
from attnum.attention.serving.decode import decode_attention
from attnum.numerics.formats import get_format
from attnum.numerics.policy import parse_policy

POLICIES = ("fp32", "fa2:bf16", "uniform:e4m3fn")


def rmse(a: torch.Tensor, gold: torch.Tensor) -> float:
    return float(((a.double().cpu() - gold) ** 2).mean().sqrt())


def compare(name: str, dev_out: torch.Tensor, cpu_out: torch.Tensor, gold: torch.Tensor, policy: str) -> dict:
    d, c = dev_out.double().cpu(), cpu_out.double()
    ulp = get_format(parse_policy(policy).out).eps
    r_dev, r_cpu = rmse(d, gold), rmse(c, gold)
    ratio = r_dev / r_cpu if r_cpu > 0 else (1.0 if r_dev == 0 else math.inf)
    return {"check": name, "policy": policy, "identical": float((d == c).double().mean()),
            "max_diff_ulps_at_1": float((d - c).abs().max()) / ulp, "rmse_device": r_dev, "rmse_cpu": r_cpu,
            "rmse_ratio": ratio, "ok": bool(1 / 1.5 <= ratio <= 1.5)}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str, reps: int) -> float:
    fn()
    sync(device)
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def checks(device: str, N: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, N, 64, generator=g, dtype=torch.float64) for _ in range(3))
    gold = golden_attention(q, k, v)
    gold_dev = golden_attention(*(x.to(device) for x in (q, k, v))).cpu()
    tol = N * 2.0**-52 * float(gold.abs().max())
    out = [{"check": "golden", "max_diff": float((gold_dev - gold).abs().max()), "tol": tol,
            "ok": bool((gold_dev - gold).abs().max() <= tol)}]
    qd, kd, vd = (x.to(device) for x in (q, k, v))
    for pol in POLICIES:
        out.append(compare("baseline", baseline_attention(qd, kd, vd, policy=pol), baseline_attention(q, k, v, policy=pol),
                           gold, pol))
        for variant in ("fa2", "fa1"):
            out.append(compare(f"flash {variant}", flash_attention(qd, kd, vd, policy=pol, variant=variant),
                               flash_attention(q, k, v, policy=pol, variant=variant), gold, pol))
    # Decode: 4 sequences, GQA 8 -> 2, a cache of 4N keys cut in 4 splits, ragged lengths.
    qc = torch.randn(4, 8, 1, 64, generator=g, dtype=torch.float64)
    kc, vc = (torch.randn(4, 2, 4 * N, 64, generator=g, dtype=torch.float64) for _ in range(2))
    lens = torch.tensor([4 * N, 3 * N + 5, N, 7])
    gold_dec = decode_attention(qc, kc, vc, cache_seqlens=lens, policy="fp64")
    for pol in POLICIES:
        dev = decode_attention(qc.to(device), kc.to(device), vc.to(device), cache_seqlens=lens.to(device), policy=pol,
                               num_splits=4)
        out.append(compare("decode split-KV", dev, decode_attention(qc, kc, vc, cache_seqlens=lens, policy=pol,
                                                                    num_splits=4), gold_dec, pol))
    return out


def timings(device: str, N: int, reps: int) -> list[dict]:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 8, N, 64, generator=g).to(device) for _ in range(3))
    qb, kb, vb = (x.to(torch.bfloat16) for x in (q, k, v))
    t32 = timed(lambda: F.scaled_dot_product_attention(q, k, v), device, reps)
    t16 = timed(lambda: F.scaled_dot_product_attention(qb, kb, vb), device, reps)
    out = []
    for pol, args, base, t_base in (("fp32", (q, k, v), "sdpa fp32", t32), ("fa2:bf16", (qb, kb, vb), "sdpa bf16", t16),
                                    ("uniform:e4m3fn", (q, k, v), "sdpa fp32", t32)):
        t = timed(lambda: flash_attention(*args, policy=pol, block_k=128), device, reps)
        out.append({"timing": f"flash_attention {pol}", "ms": 1e3 * t, "baseline": base, "baseline_ms": 1e3 * t_base,
                    "ratio": t / t_base})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="N=256 for the checks and the timings")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available on this machine: nothing checked", file=sys.stderr)
        return 3
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (dry run)"
    print(json.dumps({"device": name, "torch": torch.__version__}))
    N = 256 if args.quick else args.seq_len
    results = checks(args.device, min(N, 1024))
    for r in results + timings(args.device, N, args.reps):
        print(json.dumps(r))
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)}/{len(results)} checks passed" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
