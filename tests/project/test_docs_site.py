"""The documentation site builds from docs/ in strict mode (mkdocs.yml): a broken link, a link to a missing
anchor, a page missing from the navigation or an API reference that cannot be collected fails the build,
and with it this test. The built pages carry the lists the registries hold today (scripts/mkdocs_hooks.py
regenerates them), the README as the home page and the API reference from the docstrings."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys

import _paths
import pytest

ROOT = _paths.ROOT
pytestmark = pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                                reason="needs the docs extra (pip install -e '.[docs]'; the test extra has it)")


def _build(config, site):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "--site-dir",
                           str(site)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=_paths.HANG_S)


def _text(page) -> str:
    raw = re.sub(r"<script.*?</script>|<[^>]+>", " ", page.read_text(encoding="utf-8"), flags=re.S)
    return " ".join(html.unescape(raw).split())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    run = _build(ROOT / "mkdocs.yml", out)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_the_site_builds_in_strict_mode_with_every_page(site):
    for page in ("index.html", "audit/index.html", "reference/api/index.html", "reference/lists/index.html",
                 "findings/index.html", "changelog/index.html"):
        assert (site / page).is_file(), page


def test_the_site_holds_todays_registries_and_the_readme(site):
    from attnum.audit.probes import PROBES
    from attnum.kernels.registry import builtin_names

    lists = _text(site / "reference" / "lists" / "index.html")
    missing = [n for n in [*builtin_names(), *PROBES] if n not in lists]
    assert not missing, missing
    home = _text(site / "index.html")
    assert "What you can ask it" in home and "Bugs attnum found" in home
    api = _text(site / "reference" / "api" / "index.html")
    for name in ("round_to", "flash_attention", "golden_attention", "matmul", "assert_attention_close",
                 "fingerprint"):
        assert name in api, name
    assert "correctly rounded" in api or "Round every element" in api  # a docstring, not only a heading


def test_strict_mode_fails_on_a_broken_link_or_anchor(tmp_path):
    """The same validation settings on a two-page site with one bad link and one bad anchor."""
    import yaml

    ours = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config = {"site_name": "t", "docs_dir": str(tmp_path / "docs"), "strict": ours["strict"],
              "validation": ours["validation"], "markdown_extensions": ours["markdown_extensions"]}
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# a\n\n[b](b.md#nowhere) [c](missing.md)\n")
    (tmp_path / "docs" / "b.md").write_text("# b\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    run = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert run.returncode != 0
    assert "missing.md" in run.stderr and "nowhere" in run.stderr, run.stderr[-2000:]
