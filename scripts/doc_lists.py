"""Regenerate every list in README.md and docs/ that mirrors a registry, or check that none is stale.

    python scripts/doc_lists.py           # rewrite the generated blocks in place
    python scripts/doc_lists.py --check   # exit 1 naming each stale file (tests/project/test_doc_lists.py)

A generated block is the text between ``<!-- list: NAME -->`` and ``<!-- /list -->``. The lists of code
(commands, built-in targets, probes, packages, policies) come from :mod:`attnum.cli.catalogue`, the same
source as ``attnum --help``; ``findings`` is the table of docs/findings/*.md (one file per bug attnum
found in a real kernel: its title, package, how it was found, its status upstream). The documentation
site regenerates every block when it is built (scripts/mkdocs_hooks.py), so the site is never stale;
this script keeps the files in the repository, which GitHub shows, in step.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from attnum.cli import catalogue  # noqa: E402 - after the path: the checkout's own attnum

FINDINGS = ROOT / "docs" / "findings"
FIELD = re.compile(r"^\*\*(Package|Found by|Status upstream):\*\*\s*(.*?)(?=^\*\*|^\s*$)", re.M | re.S)


def finding(path: Path) -> dict[str, str]:
    """A findings page's title and its Package / Found by / Status upstream fields (first sentence each)."""
    text = path.read_text(encoding="utf-8")
    title = next(line[2:].strip() for line in text.splitlines() if line.startswith("# "))
    fields = {k: " ".join(v.split()) for k, v in FIELD.findall(text)}
    missing = [k for k in ("Package", "Found by", "Status upstream") if k not in fields]
    if missing:
        raise ValueError(f"{path}: no **{missing[0]}:** line (every findings page states it)")
    return {"title": title, **fields}


def _first(text: str, limit: int = 160) -> str:
    """The first sentence of ``text`` (up to a period followed by a space or the end)."""
    m = re.match(r"(.+?\.)(\s|$)", text)
    out = m.group(1) if m else text
    return out if len(out) <= limit else out[:limit].rsplit(" ", 1)[0] + " ..."


def findings_md(link_prefix: str) -> str:
    """One row per findings page: the bug (its title, linked), the package and version, and the command that
    found it (the first code span of its **Found by:** line); whether it was reported is on the page."""
    rows = ["| bug | package | found by |", "|---|---|---|"]
    for path in sorted(FINDINGS.glob("*.md")):
        if path.name == "index.md":
            continue
        f = finding(path)
        package = f["Package"].split(",")[0].split(" (")[0]
        command = re.search(r"`[^`]+`", f["Found by"])
        title = f["title"].replace("|", r"\|")
        how = command.group(0) if command else _first(f["Found by"])
        rows.append(f"| [{title}]({link_prefix}{path.name}) | {package} | {how} |")
    return "\n".join(rows)


def markdown(name: str, where: Path) -> str:
    """The generated text of list ``name`` for a block in the file ``where`` (links are relative to it)."""
    if name == "findings":
        rel = Path(os.path.relpath(FINDINGS, where.parent)).as_posix()
        return findings_md("" if rel == "." else f"{rel}/")
    if name not in catalogue.MARKDOWN:
        raise ValueError(f"{where}: <!-- list: {name} --> names no list; known: findings, {', '.join(catalogue.MARKDOWN)}")
    return catalogue.MARKDOWN[name]()


def rewrite(text: str, where: Path) -> str:
    """``text`` (the content of ``where``) with every generated block regenerated."""
    return catalogue.BLOCK.sub(lambda m: f"{m.group(1)}{markdown(m.group(2), where)}{m.group(3)}{m.group(5)}", text)


def files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path in files():
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, path)
        if new != text:
            stale.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(new, encoding="utf-8")
    if stale:
        print(("stale: " if check else "rewrote: ") + ", ".join(stale))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
