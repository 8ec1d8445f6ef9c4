"""The suite does not time itself: it passes on a healthy machine however loaded (issue 43, point 5).

- No test asserts a wall-clock bound or a speed ratio: an ``assert`` never reads a clock
  (``time.perf_counter``, ``time.monotonic``, ``time.time``) or a value computed from one. Speed lives in
  benchmarks/, as ratios against a baseline timed in the same run.
- One hang guard for the whole suite, pyproject's pytest ``timeout``, generous; no test sets a tighter one.
- A subprocess that runs a command gets ``_paths.HANG_S``, below that guard; nothing a healthy run does
  waits on a literal deadline shorter than ``_paths.PATIENCE_S``.
"""

from __future__ import annotations

import ast
import re

import _paths

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CLOCKS = {"perf_counter", "monotonic", "time", "perf_counter_ns", "monotonic_ns", "time_ns"}
TEST_FILES = sorted(p for p in _paths.TESTS.rglob("*.py") if p.name != "test_suite_hygiene.py")


def _reads_clock(node: ast.AST, clocked: set[str], timers: set[str] = frozenset()) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in CLOCKS \
                and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "time":
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in timers:
            return True
        if isinstance(sub, ast.Name) and sub.id in clocked:
            return True
    return False


def _clocked_names(fn: ast.AST, timers: set[str]) -> set[str]:
    """Names in ``fn`` assigned from a clock, from a timer function's result, or from such names."""
    clocked: set[str] = set()
    for _ in range(3):  # names computed from names computed from a clock
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value else []
            if targets and _reads_clock(node.value, clocked, timers):
                clocked |= {t.id for t in targets if isinstance(t, ast.Name)}
            # times.append(time.perf_counter() - t0): the list holds clock readings
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("append", "extend", "add", "insert") \
                    and isinstance(node.func.value, ast.Name) and any(_reads_clock(a, clocked, timers) for a in node.args):
                clocked.add(node.func.value.id)
    return clocked


def timing_asserts(source: str) -> list[int]:
    """Lines of ``assert`` statements that read a clock, directly, through names computed from one, or
    through a helper of the module that returns one (``_best_of``: the fastest of n timed runs)."""
    tree = ast.parse(source)
    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    timers: set[str] = set()
    for _ in range(2):
        for fn in fns:
            clocked = _clocked_names(fn, timers)
            if any(isinstance(n, ast.Return) and n.value is not None and _reads_clock(n.value, clocked, timers)
                   for n in ast.walk(fn)):
                timers.add(fn.name)
    bad = []
    for fn in fns:
        clocked = _clocked_names(fn, timers)
        bad += [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Assert) and _reads_clock(n, clocked, timers)]
    return sorted(set(bad))


def test_no_test_asserts_a_time_or_a_speed_ratio():
    found = {str(p.relative_to(_paths.ROOT)): lines for p in TEST_FILES
             if (lines := timing_asserts(p.read_text(encoding="utf-8")))}
    assert not found, f"assertions on a clock (move the timing to benchmarks/): {found}"


def test_the_check_catches_a_timed_assertion():
    timed = ("import time\ndef test_x():\n    t0 = time.perf_counter()\n    work()\n"
             "    took = time.perf_counter() - t0\n    ratio = took / 2\n    assert ratio < 3\n")
    assert timing_asserts(timed) == [7]
    helper = ("import time\ndef _best(fn):\n    t0 = time.perf_counter()\n    fn()\n    ts = []\n"
              "    ts.append(time.perf_counter() - t0)\n    return min(ts)\n"
              "def test_y():\n    one = _best(a)\n    ten = _best(b)\n    assert ten / one < 30\n")
    assert timing_asserts(helper) == [11]
    polled = ("import time\ndef wait():\n    t0 = time.monotonic()\n    while time.monotonic() - t0 < 9:\n"
              "        pass\n    assert done()\n")
    assert timing_asserts(polled) == []  # a deadline to wait for a condition is not a speed check


def test_one_generous_hang_guard_and_no_tighter_one():
    config = tomllib.loads((_paths.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    guard = config["tool"]["pytest"]["ini_options"]["timeout"]
    assert guard >= 3600 and guard > _paths.HANG_S >= 10 * _paths.PATIENCE_S
    assert _paths.HANG_S > _paths.START_S >= 4 * _paths.PATIENCE_S
    marked = [str(p.relative_to(_paths.ROOT)) for p in TEST_FILES if "mark.timeout" in p.read_text(encoding="utf-8")]
    assert not marked, f"per-test timeouts (the suite's one hang guard is pyproject's): {marked}"


def test_no_subprocess_runs_against_a_short_literal_deadline():
    short = []
    for p in TEST_FILES:
        for m in re.finditer(r"(?:subprocess\.run|\.communicate|\.wait)\((?:[^()]|\([^()]*\))*?timeout=(\d+(?:\.\d+)?)",
                             p.read_text(encoding="utf-8"), re.S):
            if float(m.group(1)) < _paths.PATIENCE_S:
                short.append(f"{p.relative_to(_paths.ROOT)}: timeout={m.group(1)}")
        for m in re.finditer(r"\btimeout: float = (\d+(?:\.\d+)?)", p.read_text(encoding="utf-8")):  # a helper's default
            if float(m.group(1)) < _paths.PATIENCE_S:
                short.append(f"{p.relative_to(_paths.ROOT)}: a default timeout of {m.group(1)}")
    assert not short, short
