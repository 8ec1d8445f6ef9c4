"""Speed of ``attnum scan`` on a large file: 50 MB of attention code, against reading the same bytes.

    python benchmarks/bench_scan.py [--mb 50]

Prints the scan's wall time, the time to read and split the same file into lines (the baseline,
timed in the same run), their ratio, the MB/s and the CPU. The tests check growth only (a 4x larger
file takes < 8x as long, tests/robust/test_robust_scan.py); this script is where the speed is measured.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

from attnum.audit.scan.scanner import scan

UNIT = (
    "import torch\n"
    "MASK_VALUE = -5e4\n"
    "def attention(q, k, v, keep):\n"
    "    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5\n"
    "    s = s.masked_fill(~keep, MASK_VALUE)\n"
    "    p = torch.softmax(s, dim=-1)\n"
    "    return p @ v\n"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=50.0)
    args = ap.parse_args()
    reps = int(args.mb * 1e6) // len(UNIT) + 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.py"
        path.write_text(UNIT * reps)
        t0 = time.perf_counter()
        lines = len(path.read_text().splitlines())
        base = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = scan([path])
        took = time.perf_counter() - t0
        size = path.stat().st_size / 1e6
    print(f"file {size:.0f} MB, {lines} lines, {len(report.findings)} findings; cpu {platform.processor() or platform.machine()}")
    print(f"scan {took:.2f} s ({size / took:.1f} MB/s); read+splitlines {base:.2f} s; ratio {took / base:.1f}x")


if __name__ == "__main__":
    main()
