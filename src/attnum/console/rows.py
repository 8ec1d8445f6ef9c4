"""A table of result rows for the studies' ``--json``-less output, through :mod:`attnum.console.tables`
(whole values off a terminal, fitted to its width on one; numbers right-justified)."""

from __future__ import annotations


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3e}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else f"{v:.4g}"
    return "" if v is None else str(v)


def show_table(rows: list[dict], cols: tuple[str, ...]) -> None:
    """Print the columns of ``cols`` that some row has."""
    from attnum.console.tables import print_table

    cols = tuple(c for c in cols if any(c in r for r in rows))
    just = ["right" if any(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in rows)
            else "left" for c in cols]
    print_table(cols, [[_fmt(r.get(c)) for c in cols] for r in rows], justify=just)


def text_table(rows: list[dict], cols: tuple[str, ...]) -> str:
    """The same columns as plain text (left-aligned, two spaces apart, every value whole): for output
    that is built as a string before it is printed or saved."""
    cols = tuple(c for c in cols if any(c in r for r in rows))
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    width = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, width)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, width)).rstrip() for row in cells]
    return "\n".join(lines)
