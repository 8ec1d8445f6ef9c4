"""report.html in headless Chromium: every figure decodes and the console stays silent."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _sweep_helpers import smoke_reproduction

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no headless browser found (tried chromium, chromium-browser, google-chrome); "
    "install the Debian package: apt-get install -y chromium")


def render(page: Path, profile_dir: Path) -> tuple[str, list[str]]:
    """(DOM after the load event, console lines) of ``page`` in headless Chromium."""
    proc = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", f"--user-data-dir={profile_dir}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=10000", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Chromium logs every console message (log, warn, error, uncaught exceptions) as ":CONSOLE".
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


def figures_marker(dom: str) -> tuple[int, int]:
    m = re.search(r'data-figures="(\d+)/(\d+)"', dom)
    assert m, "the page's load script did not run"
    return int(m.group(1)), int(m.group(2))


def test_every_figure_loads_and_console_is_clean(tmp_path_factory, tmp_path):
    out = smoke_reproduction(tmp_path_factory)
    n_figures = len(list((out / "figures").glob("*.png")))
    assert n_figures == 7  # fig3, fig4, fig5, fig6a, fig6b, fig6c, kernels
    dom, console = render(out / "report.html", tmp_path / "profile")
    assert figures_marker(dom) == (n_figures, n_figures)
    assert console == []
    assert "Findings" in dom and dom.count("<figure") == n_figures


def test_the_check_catches_a_broken_figure_and_a_console_error(tmp_path_factory, tmp_path):
    out = smoke_reproduction(tmp_path_factory)
    page = (out / "report.html").read_text()
    broken = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]{40}", "data:image/png;base64,AAAA", page, count=1)
    broken = broken.replace("</body>", "<script>console.error('deliberate')</script></body>")
    bad = tmp_path / "broken.html"
    bad.write_text(broken)
    dom, console = render(bad, tmp_path / "profile")
    ok, total = figures_marker(dom)
    assert (ok, total) == (total - 1, total)
    assert any("deliberate" in line for line in console)
