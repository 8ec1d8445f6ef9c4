"""Speed target: the whole corpus of upstream bugs, each case's probes at its broken and fixed releases, in
<= 30 minutes on 2 cores (`attnum bugs run`, audits isolated as the CLI runs them).

    python benchmarks/bench_bugs.py [--cache DIR] [--out DIR] [ID ...]

Two phases, timed apart: the download (every wheel the cases need fetched into ``--cache`` -- a fresh folder
by default, so every byte is downloaded -- its kernel files extracted and checked, the wheel deleted), then the
audits (from the files alone, into a fresh results store). Prints the bytes and seconds of the download, each
audit's seconds and verdict, the recall line, the CPU (model, cores, torch's threads and capability), and the
ratio of the audits' wall time to the 30-minute target (< 1 is within it).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 30 * 60.0


def _cpu() -> str:
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} usable core(s)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=None, help="ATTNUM_CACHE for the run (default: a fresh folder)")
    ap.add_argument("--out", type=Path, default=None, help="results store folder (default: a fresh folder)")
    ap.add_argument("ids", nargs="*", help="case ids (default: every case)")
    args = ap.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="attnum-bench-bugs-cache-"))
    os.environ["ATTNUM_CACHE"] = str(cache)

    import torch

    from attnum.audit.bugs import run as runner
    from attnum.audit.bugs.corpus import select
    from attnum.audit.bugs.table import summarize, totals
    from attnum.kernels.wheels import source as wheels
    from attnum.store.db import open_store
    from attnum.studies.bugs.family import recall_line

    cases = select(args.ids)
    todo = {(c.package, v) for c in cases if c.source == "wheel" for _, v in c.versions()
            if wheels.missing(c.package, v)}
    size = sum(wheels.wheel(p, v).size for p, v in todo)
    options = runner.Options(quiet=True)
    t0 = time.perf_counter()
    runner.prepare(cases, options, lambda text: print(f"  {text}", flush=True))
    t_fetch = time.perf_counter() - t0
    print(f"download: {len(todo)} wheel(s), {size / 1e6:.1f} MB, {t_fetch:.1f} s (fetch, extract, verify; cache {cache})")

    out = args.out or Path(tempfile.mkdtemp(prefix="attnum-bench-bugs-"))
    pts = runner.points(cases, options)

    def progress(i, n, p, result) -> None:
        m = result.get("metrics") or {}
        print(f"  [{i} of {n}] {result['wall_s']:6.1f} s  {p.case} {p.role} {p.target}: {m.get('verdict', 'error')}",
              flush=True)

    t1 = time.perf_counter()
    runner.run_points(pts, out, command="benchmarks/bench_bugs.py", progress=progress)
    t_audit = time.perf_counter() - t1
    with open_store(out) as store:
        keys = {p.key for p in pts}
        summary = summarize([r for r in store.rows(kind="bug-case", status=None) if r["key"] in keys], cases)
    print(recall_line(totals(summary)))
    print(f"cpu: {_cpu()}; torch {torch.__version__} threads={torch.get_num_threads()} "
          f"capability={torch.backends.cpu.get_cpu_capability()}; python {sys.version.split()[0]}")
    print(f"audits: {len(pts)} in {t_audit:.1f} s, target {TARGET_S:.0f} s, ratio {t_audit / TARGET_S:.3f}; "
          f"download apart: {t_fetch:.1f} s; store {out}")


if __name__ == "__main__":
    main()
