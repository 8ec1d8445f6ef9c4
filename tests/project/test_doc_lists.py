"""Every list that mirrors a registry is generated from it, and none disagrees with it (issue 43).

- The generated blocks of README.md and docs/ (``<!-- list: NAME -->``) are what scripts/doc_lists.py
  generates now: a new target, probe, package, policy, command or findings page that is not in them fails
  here until ``python scripts/doc_lists.py`` is run (the documentation site regenerates them itself).
- ``attnum audit --help`` names every built-in target, ``attnum kernels fetch --help`` every package,
  ``attnum --help`` every command, grouped by purpose with the Quickstart's command first.
- No text lists the packages or the targets by hand where they went stale before (``kernels fetch
  sglang|vllm`` when there were six packages).
"""

from __future__ import annotations

import importlib.util
import re

import _paths
import pytest

from attnum.cli import PANELS, catalogue, main

ROOT = _paths.ROOT
_spec = importlib.util.spec_from_file_location("doc_lists", ROOT / "scripts" / "doc_lists.py")
doc_lists = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doc_lists)


@pytest.mark.parametrize("path", doc_lists.files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_generated_blocks_are_current(path):
    text = path.read_text(encoding="utf-8")
    assert doc_lists.rewrite(text, path) == text, \
        f"{path.relative_to(ROOT)}: a generated list is stale; run python scripts/doc_lists.py"


def test_every_registry_list_is_shown_somewhere():
    used = {m.group(2) for p in doc_lists.files() for m in catalogue.BLOCK.finditer(p.read_text(encoding="utf-8"))}
    assert {"commands", "targets", "probes", "packages", "policies", "findings"} <= used, used
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "<!-- list: findings -->" in readme and "<!-- list: package-names -->" in readme


def test_the_generated_lists_hold_the_registries():
    from attnum.audit.probes import PROBES
    from attnum.kernels.registry import builtin_names
    from attnum.kernels.wheels.source import PINS
    from attnum.numerics.policy import NAMED

    assert [t for t, _, _ in catalogue.targets()] == builtin_names()
    assert [p for p, _, _ in catalogue.probes()] == list(PROBES)
    assert [p for p, _, _ in catalogue.packages()] == list(PINS)
    assert [p for p, _ in catalogue.policies()] == [f"{n}:FMT" for n in NAMED]
    findings = sorted(p.name for p in (ROOT / "docs" / "findings").glob("*.md") if p.name != "index.md")
    table = doc_lists.findings_md("")
    assert [name for name in findings if f"]({name})" in table] == findings


def _help(args, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # one name never wraps across lines
    assert main(args) == 0
    return capsys.readouterr().out


def test_audit_help_names_every_built_in_target(capsys, monkeypatch):
    from attnum.kernels.registry import builtin_names

    text = _help(["audit", "--help"], capsys, monkeypatch)
    listed = re.search(r"Built-in targets: (.*?)\.\s*$", text, re.S | re.M).group(1)
    assert [n.strip() for n in " ".join(listed.split()).split(",")] == builtin_names()


def test_kernels_fetch_help_names_every_package(capsys, monkeypatch):
    from attnum.kernels.wheels.source import PINS

    text = " ".join(_help(["kernels", "fetch", "--help"], capsys, monkeypatch).split())
    for package, version in PINS.items():
        assert f"{package} {version}" in text, package


def test_top_level_help_groups_every_command_by_purpose(capsys, monkeypatch):
    text = _help(["--help"], capsys, monkeypatch)
    panels = [p for p in PANELS if f" {p} " in text]
    assert panels == [p for p in PANELS if p != "More"] or panels == list(PANELS), panels
    positions = [text.index(f" {p} ") for p in panels]
    assert positions == sorted(positions)
    first = re.search(r"Reproduce and sweep.*?\n\W*(\w[\w-]*)", text, re.S).group(1)
    assert first == "reproduce", first  # the Quickstart's command first
    for _, name, _ in catalogue.commands():
        assert f" {name.split()[0]} " in text, name


STALE = [
    (r"kernels fetch [a-z-]+\\?\|[a-z-]+", "packages listed by hand (attnum kernels fetch PACKAGE; generated: package-names)"),
]


def test_no_hand_written_package_list_outside_generated_blocks():
    hits = []
    for path in [*doc_lists.files(), *(ROOT / "src" / "attnum" / "cli").glob("*.py")]:
        text = catalogue.BLOCK.sub("", path.read_text(encoding="utf-8"))
        for pattern, why in STALE:
            for m in re.finditer(pattern, text):
                hits.append(f"{path.relative_to(ROOT)}: {m.group(0)!r}: {why}")
    assert not hits, hits
