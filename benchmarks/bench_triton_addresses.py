"""What the Triton model's address checks cost: the same real-kernel audit cases with the checks on and off.

    TRITON_INTERPRET=1 python benchmarks/bench_triton_addresses.py [--repeat 3] [--targets sglang-decode,vllm-unified]
        [--numerics faithful]

Runs tests/_real_kernels_check.py's lean cases (per kernel: a decode case, vLLM's prefill case; fp16, bf16,
fp32) through the registry's targets, once with :func:`attnum.kernels.triton.addresses.checked` as attnum
runs it and once with it replaced by a no-op, alternating, ``--repeat`` times each, in this one process.
Prints each time, the median ratio on / off, the number of accesses checked and lanes in them per
audit with the time spent inside the check (its share of that audit), and the CPU. Needs the kernel files (``attnum kernels fetch sglang`` / ``vllm``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--targets", default="sglang-decode,vllm-unified")
    ap.add_argument("--numerics", default="faithful", choices=("faithful", "raw"))
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 (before triton is imported)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import _real_kernels_check as lean

    from attnum.audit.harness import ProbeContext
    from attnum.kernels.registry import resolve
    from attnum.kernels.triton import addresses
    from attnum.kernels.triton import selftest as triton_selftest
    from attnum.numerics.formats import get_format, torch_dtype

    torch.set_num_threads(1)
    assert not triton_selftest.failure(), triton_selftest.failure()
    names = [n for n in args.targets.split(",") if n]
    checked, check = addresses.checked, addresses.check
    seen = {"accesses": 0, "lanes": 0, "seconds": 0.0}

    def counting(ptrs, mask, width, verb):
        t0 = time.perf_counter()
        try:
            return check(ptrs, mask, width, verb)
        finally:
            seen["seconds"] += time.perf_counter() - t0
            seen["accesses"] += 1
            seen["lanes"] += int(getattr(ptrs, "size", 1))

    def audit(on: bool) -> float:
        addresses.checked = checked if on else contextlib.nullcontext  # interp.under looks it up per call
        try:
            t0 = time.perf_counter()
            for name in names:
                target = resolve(name, "cpu", numerics=args.numerics)
                if not target.available:
                    sys.exit(f"{name}: {target.reason}")
                for dt in ("fp16", "bf16", "fp32"):
                    ctx = ProbeContext(target=target.fn, dtype=torch_dtype(dt), fmt=get_format(dt),
                                       causal_alignment=target.declared.get("causal_alignment", "top_left"))
                    for case in lean.cases(name, ctx, args.numerics):
                        assert case.verdict.status != "out of bounds", case.verdict.note
            return time.perf_counter() - t0
        finally:
            addresses.checked = checked

    audit(True)  # warm-up: kernels parsed, modules loaded
    addresses.check = counting
    counted = audit(True)  # one audit's accesses, and the time spent checking them
    addresses.check = check
    times = {"on": [], "off": []}
    for _ in range(args.repeat):
        for mode in ("on", "off"):
            times[mode].append(audit(mode == "on"))
    ratio = statistics.median(a / b for a, b in zip(times["on"], times["off"], strict=True))
    for mode, ts in times.items():
        print(f"checks {mode:3s} " + " ".join(f"{t:6.2f}s" for t in ts))
    print(f"targets={','.join(names)} numerics={args.numerics} cpu={cpu_name()!r} "
          f"capability={torch.backends.cpu.get_cpu_capability()} threads={torch.get_num_threads()} "
          f"accesses_checked={seen['accesses']} lanes={seen['lanes']} in_check={seen['seconds']:.3f}s "
          f"of {counted:.2f}s ({seen['seconds'] / counted:.1%}) ratio on/off={ratio:.3f}")


if __name__ == "__main__":
    main()
