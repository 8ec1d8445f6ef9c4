"""Speed target: the faithful Triton model costs <= 2x the raw interpreter on the same audit.

    TRITON_INTERPRET=1 python benchmarks/bench_triton_numerics.py [--repeat 3] [--targets sglang-decode,vllm-unified]

Runs the same cases (tests/_real_kernels_check.py's lean audit: a decode case per kernel, vLLM's prefill
case, in fp16, bf16 and fp32) under ``--numerics raw`` and ``faithful``, alternating, ``--repeat`` times
each, in this one process (the kernels are interpreted in both; the self-test runs once, before timing).
Prints each time, the median ratio faithful / raw, the CPU, and the ratio to the 2x target (< 1 is within
it). Needs the kernel files (``attnum kernels fetch sglang`` / ``vllm``) and TRITON_INTERPRET=1.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

TARGET_RATIO = 2.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--targets", default="sglang-decode,vllm-unified")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 (before triton is imported)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import _real_kernels_check as lean

    from attnum.audit.harness import ProbeContext
    from attnum.kernels.registry import resolve
    from attnum.kernels.triton import selftest as triton_selftest
    from attnum.numerics.formats import get_format, torch_dtype

    torch.set_num_threads(1)
    assert not triton_selftest.failure(), triton_selftest.failure()
    names = [n for n in args.targets.split(",") if n]

    def audit(numerics: str) -> float:
        t0 = time.perf_counter()
        for name in names:
            target = resolve(name, "cpu", numerics=numerics)
            if not target.available:
                sys.exit(f"{name}: {target.reason}")
            for dt in ("fp16", "bf16", "fp32"):
                ctx = ProbeContext(target=target.fn, dtype=torch_dtype(dt), fmt=get_format(dt),
                                   causal_alignment=target.declared.get("causal_alignment", "top_left"))
                lean.cases(name, ctx, numerics)
        return time.perf_counter() - t0

    audit("raw")  # warm-up: kernels parsed, modules loaded
    times = {"raw": [], "faithful": []}
    for _ in range(args.repeat):
        for numerics in ("raw", "faithful"):
            times[numerics].append(audit(numerics))
    ratio = statistics.median(f / r for f, r in zip(times["faithful"], times["raw"], strict=True))
    for numerics, ts in times.items():
        print(f"{numerics:9s} " + " ".join(f"{t:6.2f}s" for t in ts))
    print(f"targets={','.join(names)} cpu={platform.processor() or platform.machine()} "
          f"capability={torch.backends.cpu.get_cpu_capability()} threads={torch.get_num_threads()} "
          f"ratio faithful/raw={ratio:.2f} target={TARGET_RATIO:.0f}x ratio_to_target={ratio / TARGET_RATIO:.2f}")


if __name__ == "__main__":
    main()
