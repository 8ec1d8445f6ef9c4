"""The docs check: what the README and docs/ tell a user to run runs, and what the README states has a source.

- Every ``attnum ...`` line in a fenced code block of README.md or docs/*.md (``$ attnum ...`` in a
  transcript too) runs in a temporary folder (``examples/`` linked in) and ends with exit 0, 1 (a
  check failed: an audit that finds the planted bug) or 3 (nothing to test here), never 2 (usage,
  bad input) or an internal error (how long it takes is not checked: a benchmark's business). A block
  that is expensive, needs a GPU or the network, or shows a synopsis (``TARGET``, ``[--flag]``) has the
  line ``<!-- docs-check: illustrative -->`` directly above its fence and is not run.
- Every README section (``##``/``###``) that states a measured number (a time, a ratio, a percentage,
  a size, an error like 2.4e-4) carries ``<!-- produced-by: PATH ... -->`` naming the script(s) that
  produce it, and every path it names exists.
- The Policy field list of docs/core-api.md is the one ``scripts/policy_fields.py`` generates.
- No doc or docstring cites the project's private notes.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import _paths
import pytest

ROOT = _paths.ROOT
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ILLUSTRATIVE = "<!-- docs-check: illustrative -->"
PRODUCED = re.compile(r"<!--\s*produced-by:\s*(.*?)\s*-->")
# A measured number: a decimal with a unit or a ratio sign, a percentage, or a float in e-notation.
MEASURED = re.compile(r"(?<![\w.])\d[\d,]*(\.\d+)?\s?(×|x\b|%|\s?(ms|s|min|MB|GB|TB|GF/s|ULPs?)\b)|\d\.\d+e[-+]\d+")


def code_blocks(path: Path) -> list[tuple[int, bool, list[str]]]:
    """(line of the fence, marked illustrative, the block's lines) for each fenced block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            above = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            out.append((i + 1, above == ILLUSTRATIVE, lines[i + 1:j]))
            i = j + 1
        else:
            i += 1
    return out


def commands() -> list[tuple[str, str]]:
    """(where, command line) for every attnum command a reader is told to run."""
    found = []
    for path in DOCS:
        for line_no, illustrative, body in code_blocks(path):
            if illustrative:
                continue
            for text in body:
                text = text.strip()
                text = text[2:] if text.startswith("$ ") else text
                if text.split(" ", 1)[0] == "attnum":
                    found.append((f"{path.relative_to(ROOT)}:{line_no}", text))
    return found


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNUM_PROGRESS_INTERVAL", "600")
    return tmp_path


@pytest.mark.parametrize("where,line", commands(), ids=[f"{w} {c[:50]}" for w, c in commands()])
def test_documented_command_runs(where, line, workdir, capsys):
    """In this process (no interpreter and torch start-up per command; the audit's target still runs in
    its own child process)."""
    from attnum.cli import main

    argv = shlex.split(line, comments=True)
    assert not any(a.startswith("[") or a.isupper() for a in argv[1:]), \
        f"{where}: {line!r} is a synopsis; mark its block {ILLUSTRATIVE}"
    code = main(argv[1:])
    err = capsys.readouterr().err
    assert code in (0, 1, 3) and "internal error" not in err, f"{where}: {line!r} exited {code}: {err.strip()[-500:]}"


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of each ##/### section."""
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def prose(body: str) -> str:
    """The section without code blocks, inline code, links' targets and HTML comments."""
    body = re.sub(r"```.*?```", "", body, flags=re.S)
    body = re.sub(r"<!--.*?-->", "", body, flags=re.S)
    body = re.sub(r"`[^`]*`", "", body)
    return re.sub(r"\]\([^)]*\)", "]", body)


def test_every_readme_number_names_the_script_that_produces_it():
    missing, bad = [], []
    for heading, body in sections((ROOT / "README.md").read_text(encoding="utf-8")):
        named = [p for m in PRODUCED.finditer(body) for p in m.group(1).split()]
        for token in named:
            if "/" in token and not (ROOT / token).exists():
                bad.append(f"{heading}: {token}")
        number = MEASURED.search(prose(body))
        if number and not any("/" in t and (ROOT / t).exists() for t in named):
            missing.append(f"{heading} (e.g. {number.group(0)!r})")
    assert not bad, f"produced-by names files that do not exist: {bad}"
    assert not missing, f"README sections stating numbers without <!-- produced-by: PATH -->: {missing}"


def test_measured_number_pattern():
    for text in ("143 s", "1.86×", "10 %", "2.4e-4", "226 MB", "0.5 ULP", "25x"):
        assert MEASURED.search(text), text
    for text in ("fp16", "e4m3fn", "Python 3.11", "Figs. 3–6", "arXiv 2405.02803", "N = 4096"):
        assert not MEASURED.search(text), text


def test_policy_fields_in_core_api_are_generated_from_the_dataclass():
    import importlib.util

    spec = importlib.util.spec_from_file_location("policy_fields", ROOT / "scripts" / "policy_fields.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    block = mod.block()
    assert "UNDOCUMENTED" not in block, "a Policy field has no line in scripts/policy_fields.py"
    doc = (ROOT / "docs" / "core-api.md").read_text(encoding="utf-8")
    inside = doc.split("<!-- policy-fields:start -->\n", 1)[1].split("\n<!-- policy-fields:end -->", 1)[0]
    assert inside == block, "docs/core-api.md's Policy fields are stale: run python scripts/policy_fields.py"


def test_no_private_notes_are_cited():
    hits = []
    for path in [*DOCS, ROOT / "CHANGELOG.md", *(ROOT / "src").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        for bad in ("shared/research", "research/", "research notes", "as recalled"):
            if bad in text:
                hits.append(f"{path.relative_to(ROOT)}: {bad!r}")
    assert not hits, hits
