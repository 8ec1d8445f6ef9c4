"""Every figure README.md and docs/ state about attnum's own output is checked against that output.

A figure in the docs carries a marker just before it, ``<!-- figure: NAME -->``. ``FIGURES`` says for
each NAME how to read the stated value from the text after the marker (a regular expression whose
groups are the figure; by default the number right after the marker) and how to get the true value
from the code or a cheap command (the probe catalogue, ``attnum scan examples/``, the quick profile's
plan, the replay script's list). A figure that needs a full audit run is checked by a test marked
``slow``. A marker with no entry here, or an entry no doc uses, fails too: figures cannot silently
drop out of the check.

The size of a registry (how many probes, targets, packages) is not a figure but a generated list
(``<!-- list: probe-count -->``, scripts/doc_lists.py; tests/project/test_doc_lists.py): it follows the
registry without a hand edit.

Figures that are *measurements* (timings, ratios, errors of a run on some machine) are not here:
those name the script that produces them (``<!-- produced-by: -->``, tests/project/test_docs.py) and say on
what machine and when they were measured.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable

import _paths
import pytest

ROOT = _paths.ROOT
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*figure:\s*([\w-]+)\s*-->")
NUMBER = r"\s*([\d,]+)"
WINDOW = 2000  # characters after a marker in which its figure must stand
DTYPES = 3  # attnum audit's default --dtype bf16,fp16,fp32


def _probes():
    from attnum.audit.probes import PROBES

    return [p for p in PROBES.values() if p.default]


def _feature_probes() -> list[str]:
    """Probes of a declared score feature (softcap, window, sinks: attnum.audit.features): a target that
    declares none of them gets one 'unsupported' row per dtype from each."""
    serving = set(_serving_probes())  # a decode feature (mla) is unsupported once, for the missing entry point
    return [p.name for p in _probes() if p.name not in serving
            and re.search(r"^from attnum\.audit\.features import", inspect.getsource(sys.modules[p.run.__module__]), re.M)]


def _serving_probes() -> list[str]:
    """Probes for merge/decode entry points: those built on attnum.audit.serving. An SDPA-only target
    has neither entry point, so each of them is one 'unsupported' row per dtype."""
    names = []
    for p in _probes():
        source = inspect.getsource(sys.modules[p.run.__module__])
        # a score-feature probe (built on features.feature_case) that also asks a decode entry point
        # (softcap-overflow) is a feature probe
        if re.search(r"^from attnum\.audit\.serving import", source, re.M) \
                and not re.search(r"^from attnum\.audit\.features import .*\bfeature_case\b", source, re.M):
            names.append(p.name)
    return names


@functools.cache
def _scan_examples() -> tuple[str, str]:
    from attnum.audit.scan.scanner import scan_paths

    findings, files = scan_paths([ROOT / "examples"])
    return str(len(findings)), str(files)


def _quick_points() -> tuple[str]:
    from attnum.sweep.registry import profiles

    return (str(len(profiles()["quick"]("quick", "cpu").planned())),)


def _replay_attacks() -> tuple[str]:
    spec = importlib.util.spec_from_file_location("replay_attacks", ROOT / "scripts" / "replay_attacks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return (str(len(mod.ATTACKS)),)


# NAME: (pattern of the stated figure after the marker, the true value as strings).
FIGURES: dict[str, tuple[str, Callable[[], tuple[str, ...]]]] = {
    "serving-probes": (NUMBER, lambda: (str(len(_serving_probes())),)),
    "sdpa-unsupported": (NUMBER, lambda: (str((len(_serving_probes()) + len(_feature_probes())) * DTYPES),)),
    "scan-examples": (r"(\d+) finding\(s\) at or above low in (\d+) file\(s\)", _scan_examples),
    "quick-points": (NUMBER, _quick_points),
    "replay-attacks": (NUMBER, _replay_attacks),
}
# Checked by the slow test below (a full audit of torch-sdpa-math: about 30 s idle, minutes under load).
SLOW_FIGURES = {"sdpa-math-summary": r"PASSED \((\d+) note, (\d+) pass, (\d+) unsupported"}


def stated() -> list[tuple[str, str, tuple[str, ...]]]:
    """(where, figure name, the values the docs state) for every marker in README.md and docs/."""
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in MARKER.finditer(text):
            name = m.group(1)
            where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            pattern = FIGURES[name][0] if name in FIGURES else SLOW_FIGURES.get(name)
            if pattern is None:
                out.append((where, name, ()))
                continue
            after = text[m.end():m.end() + WINDOW]
            found = re.match(pattern, after) if pattern == NUMBER else re.search(pattern, after)
            out.append((where, name, tuple(g.replace(",", "") for g in found.groups()) if found else ()))
    return out


STATED = stated()


def test_every_marker_names_a_known_figure_and_every_figure_is_stated():
    unknown = [f"{w}: {n}" for w, n, _ in STATED if n not in FIGURES and n not in SLOW_FIGURES]
    assert not unknown, f"markers with no check in tests/project/test_doc_figures.py: {unknown}"
    unused = sorted({*FIGURES, *SLOW_FIGURES} - {n for _, n, _ in STATED})
    assert not unused, f"figures no doc states any more (remove them here): {unused}"
    unread = [f"{w}: {n}" for w, n, v in STATED if not v]
    assert not unread, f"a marker whose figure was not found right after it: {unread}"


@pytest.mark.parametrize("where,name,values", [s for s in STATED if s[1] in FIGURES],
                         ids=[f"{w} {n}" for w, n, _ in STATED if n in FIGURES])
def test_doc_figure_matches_the_command(where, name, values):
    truth = FIGURES[name][1]()
    assert values == truth, f"{where}: the docs say {name} = {values}, the code gives {truth}"


@pytest.mark.slow
def test_sdpa_math_summary_matches_a_full_audit():
    from attnum.audit.config import AuditConfig
    from attnum.audit.report import summary
    from attnum.audit.runner import run_audit

    line = summary(run_audit(AuditConfig(target="torch-sdpa-math")))
    truth = re.search(SLOW_FIGURES["sdpa-math-summary"], line).groups()
    for where, name, values in STATED:
        if name == "sdpa-math-summary":
            assert values == truth, f"{where}: the docs say {values}, the audit gives {line}"
