"""MkDocs hooks of attnum's documentation site (mkdocs.yml, ``hooks:``).

- Every ``<!-- list: NAME -->`` block is regenerated from the registries as the page is built
  (scripts/doc_lists.py): the site's lists of commands, targets, probes, packages, policies and findings
  cannot be stale, whatever the files in the repository say.
- The site's home (docs/index.md) is README.md, its links into docs/ made relative to the site; the
  changelog page (docs/changelog.md) is CHANGELOG.md. One text each, never a copy to keep in step.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("doc_lists", ROOT / "scripts" / "doc_lists.py")
doc_lists = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doc_lists)

# docs/ pages whose text is a file at the repository's top
INCLUDED = {"index.md": ROOT / "README.md", "changelog.md": ROOT / "CHANGELOG.md"}


def readme_as_home(text: str) -> str:
    """README.md's links as the site's home page sees them: ``docs/x.md`` -> ``x.md``, CHANGELOG.md -> the
    changelog page."""
    text = re.sub(r"\]\(docs/", "](", text)
    text = re.sub(r'src="docs/', 'src="', text)
    return text.replace("](CHANGELOG.md)", "](changelog.md)")


def on_page_markdown(markdown: str, page, config, files) -> str:
    src_uri = page.file.src_uri
    if src_uri in INCLUDED:
        source = INCLUDED[src_uri]
        text = doc_lists.rewrite(source.read_text(encoding="utf-8"), source)
        return readme_as_home(text) if src_uri == "index.md" else text
    return doc_lists.rewrite(markdown, ROOT / "docs" / src_uri)
