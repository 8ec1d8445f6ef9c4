"""Figure and a standalone report.html for ``attnum spec --out DIR``.

A section of its own (not part of the sweep report): it draws the result dict the command writes
(``spec.json``), never the numerics.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from attnum.report.page import embedded_png as _svg_free_png
from attnum.report.page import html_table as _table
from attnum.report.page import standalone_page as _page
from attnum.report.plotting import finish, format_color, panels, save
from attnum.store.jsonout import dumps
from attnum.store.outfile import write_atomic


def spec_figure(rows: list[dict], out: Path) -> Path:
    """TV to the target against k, one line per format (solid: speculative, dashed: plain sampling)."""
    fig, ax = panels(1, title="Speculative decoding: exact TV to the target", width=6.0)
    ax = ax[0, 0]
    fmts = list(dict.fromkeys(r["format"] for r in rows))
    for f in fmts:
        pts = sorted((r["k"], r) for r in rows if r["format"] == f and r.get("tv") is not None)
        if not pts:
            continue
        c = format_color(f, fmts)
        ax.plot([k for k, _ in pts], [max(r["tv"], 1e-18) for _, r in pts], "-o", color=c, label=f"{f} speculative")
        ax.plot([k for k, _ in pts], [max(r["tv_plain"], 1e-18) for _, r in pts], "--", color=c, alpha=0.6,
                label=f"{f} plain sampling")
    ax.set_yscale("log")
    finish(ax, xlabel="draft tokens k", ylabel="total variation (completed k+1 tokens)")
    return save(fig, out, "spec_tv")[0]


def write_spec_report(result: dict, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic((out / "spec.json"), dumps(result, indent=2, default=str))
    rows = result["rows"]
    sections = [f"<h2>TV against format and k</h2><p>config: <code>{html.escape(json.dumps(result['config'], default=str))}"
                "</code></p>"]
    if any("tv" in r for r in rows):
        sections.append(_svg_free_png(spec_figure(rows, out)))
    cols = [c for c in ("format", "k", "vocab", "tv", "tv_plain", "ratio", "tv_first", "fail", "expected_tokens",
                        "mc_tv_first", "mc_floor") if any(c in r for r in rows)]
    sections.append(_table(rows, cols))
    path = out / "report.html"
    write_atomic(path, _page("attnum spec: speculative decoding under finite precision", sections))
    return path
