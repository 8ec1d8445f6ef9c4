"""Write tests/slow_tests.txt: the tests a measured run found at or above a threshold, for the
``slow`` marker (tests/conftest.py adds it to every test listed there).

    python -m pytest -q -p no:randomly --junitxml=/tmp/durations.xml
    python scripts/slow_tests.py /tmp/durations.xml [--threshold 3.0]

``python -m pytest -m "not slow"`` is then a first check (docs/testing.md: how long it took where). Tests marked ``slow`` in their own file stay so; this list only adds. Each line keeps the
measured seconds, so a reader sees why a test is there; the header says when and on what.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "slow_tests.txt"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path, help="a --junitxml file of a whole-suite run")
    ap.add_argument("--threshold", type=float, default=3.0, help="seconds (default 3.0)")
    args = ap.parse_args(argv)
    if not args.junit.is_file():
        print(f"slow_tests: error: junit={str(args.junit)!r} is not allowed; expected a --junitxml file", file=sys.stderr)
        return 2
    ids = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly"], cwd=ROOT,
                         capture_output=True, text=True).stdout.splitlines()
    by_name = {(i.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py"), i.split("::")[-1]): i for i in ids if "::" in i}
    rows = []
    for tc in ET.parse(args.junit).iter("testcase"):
        key = ((tc.get("classname") or "").split(".")[-1], tc.get("name") or "")
        secs = float(tc.get("time") or 0.0)
        if secs >= args.threshold and key in by_name:
            rows.append((secs, by_name[key]))
    rows.sort(key=lambda r: r[1])
    head = (f"# Tests marked slow by measurement (scripts/slow_tests.py, threshold {args.threshold:g} s):\n"
            f"# {datetime.date.today().isoformat()}, {_cpu()}, {len(rows)} tests. Format: seconds node-id.\n")
    OUT.write_text(head + "".join(f"{s:.1f} {i}\n" for s, i in rows))
    print(f"slow_tests: {len(rows)} tests at or above {args.threshold:g} s -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
