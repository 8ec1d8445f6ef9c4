"""Peak memory of golden, baseline and flash against N, causal and not (masks are cut per tile).

Each configuration runs in a fresh process; the figure is its peak RSS minus the RSS just before
the call (so the interpreter, torch and the inputs themselves are not counted), measured from
/proc/self/status (VmHWM, reset through /proc/self/clear_refs where the kernel allows it, else
ru_maxrss). B = H = 1, d = 128, float64 inputs. The baseline is N(0,1)-agnostic: same cost for any
values. Targets (issue 8): golden < 2 GB and flash fa2:bf16 < 1 GB extra at N = S = 32768, causal.

    python benchmarks/bench_memory.py                 # N = 4096 ... 32768, all three (several minutes)
    python benchmarks/bench_memory.py --lengths 8192 --impls flash
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, torch
from attnum import baseline_attention, flash_attention, golden_attention
impl, n, causal = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 1, n, 128, generator=g, dtype=torch.float64) for _ in range(3))

def hwm_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0

try:
    open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark to the current RSS
except OSError:
    pass
before = rss_kb()
t0 = time.perf_counter()
if impl == "golden":
    out = golden_attention(q, k, v, is_causal=causal)
elif impl == "baseline":
    out = baseline_attention(q, k, v, is_causal=causal, policy="fa2:bf16")
else:
    out = flash_attention(q, k, v, is_causal=causal, policy="fa2:bf16")
seconds = time.perf_counter() - t0
assert torch.isfinite(out).all()
print(json.dumps({"extra_mb": (hwm_kb() - before) / 1024, "seconds": seconds}))
"""


def measure(impl: str, n: int, causal: bool) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, impl, str(n), "1" if causal else "0"],
                         capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"{impl} N={n} causal={causal} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="4096,8192,16384,32768")
    ap.add_argument("--impls", default="golden,baseline,flash")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    impls = args.impls.split(",")
    print(f"{'impl':<9} {'N = S':>6} {'causal':>6} {'extra peak MB':>14} {'seconds':>8}  target")
    for impl in impls:
        for n in lengths:
            for causal in (False, True):
                r = measure(impl, n, causal)
                target = ""
                if n == 32768 and causal and impl in ("golden", "flash"):
                    limit = 2048 if impl == "golden" else 1024
                    target = f"< {limit} MB {'ok' if r['extra_mb'] < limit else 'MISSED'}"
                print(f"{impl:<9} {n:>6} {str(causal):>6} {r['extra_mb']:>14.0f} {r['seconds']:>8.1f}  {target}",
                      flush=True)


if __name__ == "__main__":
    main()
