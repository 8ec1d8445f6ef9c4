"""``attnum fingerprint`` at the default shape: wall time per target, against a baseline checkout (issue 41:
a tensor-core target under 5 minutes on 2 cores, the existing targets no slower).

    python benchmarks/bench_fingerprint.py [--baseline-src DIR] [--targets "T1;T2;..."] [--reps 1]

Each target is fingerprinted by the CLI in a fresh process (``python -m attnum fingerprint TARGET --dtype
bf16 --json``: lengths 512 and 1200, 16 heads, d = 64, the target in its kernel server), with this
checkout's ``src`` first on ``PYTHONPATH`` and, when ``--baseline-src`` names another checkout's ``src``
(an earlier commit, unpacked with ``git archive COMMIT src | tar -x -C DIR``), with that one, alternating
(baseline, this, baseline, ...) so that the machine's load falls on both alike. Prints per target the wall
seconds of each run, the calls, the answer (policy or "unexplained"), the ratio this / baseline of the
medians, the CPU model and the load average before and after (the machine is shared: a ratio is of two
timings in this run, but a loaded machine slows them unequally). The default targets: a tensor-core
kernel (attnum's ``fa2:bf16,mma=sm80`` flash, tile not told), attnum's FA2 flash, SDPA's math path, and
SGLang's Triton decode kernel (interpreted; left out when its wheel is not fetched).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_core import cpu_model

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("flash:fa2:bf16,mma=sm80", "flash:fa2:bf16", "torch-sdpa-math", "sglang-decode")


def run(target: str, src: Path, extra: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "attnum", "fingerprint", target, "--dtype", "bf16", "--json", *extra],
                       capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode not in (0,):
        return {"wall": wall, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:160]}
    doc = json.loads(p.stdout)
    return {"wall": wall, "calls": doc.get("calls"), "answer": doc.get("policy") or "unexplained",
            "exact": doc.get("bit_exact_fraction"), "peak": doc.get("peak_rss_mib"),
            "target_peak": doc.get("target_peak_rss_mib")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline-src", type=Path, default=None)
    ap.add_argument("--targets", default=";".join(TARGETS), help="targets separated by ';' (a policy has commas)")
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    here = ROOT / "src"
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {os.getloadavg()}")
    for target in args.targets.split(";"):
        mine, base = [], []
        for _ in range(args.reps):
            if args.baseline_src is not None:
                base.append(run(target, args.baseline_src, []))
            mine.append(run(target, here, []))
        for label, rows in (("baseline", base), ("this", mine)):
            for r in rows:
                print(f"{target:28s} {label:8s} {r['wall']:7.1f} s  " + ("error: " + r["error"] if "error" in r else
                      f"{r['calls']} calls, {r['answer']}, bit-exact {r['exact']}, peak {r['peak']} MiB "
                      f"(target {r.get('target_peak')} MiB)"), flush=True)
        if base and all("error" not in r for r in base + mine):
            ratio = statistics.median(r["wall"] for r in mine) / statistics.median(r["wall"] for r in base)
            print(f"{target:28s} this / baseline = {ratio:.2f}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
