"""HTML pieces shared by the report shell and the families' report sections: escaping, numbers,
tables, verdicts and embedded figures (one look for every section of ``report.html``)."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any


def esc(x: Any) -> str:
    return html.escape(str(x))


def num(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return esc(x)


def table(head: list[str], body: list[list[Any]], raw_cols: tuple[int, ...] = ()) -> str:
    if not body:
        return "<p><em>none</em></p>"
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    trs = "".join(
        "<tr>" + "".join(f"<td>{c if i in raw_cols else num(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in body
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


CSS_CLASS = {"holds": "holds", "does not hold": "nothold", "not tested": "nottested",
              "holds by construction": "construct", "mixed": "mixed"}

def verdict(v: str) -> str:
    return f"<span class='{CSS_CLASS[v]}'>{esc(v)}</span>"


def figure(name: str, png: Path, caps: dict | None = None) -> str:
    data = base64.b64encode(png.read_bytes()).decode()
    caption = (caps or {}).get(name, name)
    return (f"<figure id='{esc(name)}'><img class='figure' alt='{esc(name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{esc(caption)} SVG: <code>figures/{esc(name)}.svg</code></figcaption></figure>")
