"""A plain-text table of result rows for the terminal (the studies' ``--json``-less output)."""

from __future__ import annotations


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3e}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else f"{v:.4g}"
    return "" if v is None else str(v)


def text_table(rows: list[dict], cols: tuple[str, ...]) -> str:
    """Columns ``cols`` (those some row has), left-aligned, two spaces apart."""
    cols = tuple(c for c in cols if any(c in r for r in rows))
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    width = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, width))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, width)) for row in cells]
    return "\n".join(lines)
