"""Where things are, for tests in any folder of tests/ (helpers, data and scripts live at its top)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EXAMPLES = ROOT / "examples"
