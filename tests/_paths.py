"""Where things are, for tests in any folder of tests/ (helpers, data and scripts live at its top)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EXAMPLES = ROOT / "examples"

# Deadlines, never speed targets. A test that waits for something that happens at once on a healthy machine
# (workers exiting with their driver, a first row, a child's answer to a small call) gives it PATIENCE_S,
# so that a machine at load 10 on 2 cores still passes; a subprocess running a whole command gets HANG_S,
# below pytest's own hang guard (pyproject.toml: timeout), so that a hang ends with a message naming it.
PATIENCE_S = 300.0  # a local Ray instance took more than 150 s to store its first row at load 16
# A start -- a sweep's first row, a local Ray instance or a process group up -- gets START_S: at load 12 to 14 on
# 2 cores (the suite beside a CI run and six CPU hogs) a local Ray instance had stored no row after 300 s.
START_S = 1200.0
HANG_S = 3000.0
