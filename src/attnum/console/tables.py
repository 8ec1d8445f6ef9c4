"""Tables that fit where they go: one printer for every command that prints a table.

On a terminal: a rich table that fits the terminal's width (text columns wrap, number columns never
do). Anywhere else (a pipe, a file, a CI log) rich would fall back to 80 columns and break names and
numbers across lines (``4.62e-12`` printed as ``4.62e-1`` then ``2``); there the table is written as
plain text whose columns are as wide as their widest value, so every value and name is whole on its
line. ``ATTNUM_TABLE`` chooses the form explicitly: ``plain`` (aligned text), ``tsv`` (tab-separated,
one header line, for ``cut``/spreadsheets) or ``rich``; default ``auto``. Commands that have
``--json`` print JSON instead of any table.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TextIO

TABLE_ENV = "ATTNUM_TABLE"
MODES = ("auto", "plain", "tsv", "rich")


def is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed, or not a file
        return False


def table_mode(stream: TextIO | None = None) -> str:
    """``rich``, ``plain`` or ``tsv`` for ``stream`` (stdout by default): ``ATTNUM_TABLE``, else
    rich on a terminal and plain elsewhere. An unknown value of the variable counts as ``auto``."""
    stream = sys.stdout if stream is None else stream
    mode = os.environ.get(TABLE_ENV, "auto").strip().lower()
    if mode not in MODES or mode == "auto":
        return "rich" if is_tty(stream) else "plain"
    return mode


def _cell(value: object) -> str:
    """One line per cell: a value never spans lines (newlines and tabs become spaces)."""
    text = "" if value is None else str(value)
    return " ".join(text.split()) if ("\n" in text or "\t" in text) else text


def render_plain(columns: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None,
                 caption: str | None = None, justify: Sequence[str] | None = None) -> str:
    """Aligned text: each column as wide as its widest cell, two spaces between columns, nothing cut."""
    cells = [[_cell(v) for v in row] for row in rows]
    heads = [_cell(c) for c in columns]
    just = list(justify) if justify is not None else ["left"] * len(heads)
    width = [max([len(h), *(len(r[i]) for r in cells if i < len(r))]) for i, h in enumerate(heads)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if j == "right" else v.ljust(w) for v, w, j in zip(values, width, just)]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out += [line(heads), "  ".join("-" * w for w in width)]
    out += [line(r) for r in cells]
    if caption:
        out.append(caption)
    return "\n".join(out)


def render_tsv(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Tab-separated: a header line and one line per row (the title and caption are left out)."""
    return "\n".join("\t".join(_cell(v) for v in row) for row in [list(columns), *rows])


def print_table(columns: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None,
                caption: str | None = None, justify: Sequence[str] | None = None,
                styles: Sequence[str | None] | None = None, stream: TextIO | None = None) -> None:
    """Print a table in the form that fits ``stream`` (stdout by default); see the module docstring.

    ``justify``: ``"left"``/``"right"`` per column (right-justified columns are numbers and are never
    wrapped, even on a narrow terminal); ``styles``: a rich style per row, used on a terminal only.
    """
    stream = sys.stdout if stream is None else stream
    mode = table_mode(stream)
    just = list(justify) if justify is not None else ["left"] * len(columns)
    if mode == "tsv":
        print(render_tsv(columns, rows), file=stream, flush=True)
        return
    if mode == "plain":
        print(render_plain(columns, rows, title=title, caption=caption, justify=just), file=stream, flush=True)
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title) if title else None, title_justify="left",
                  caption=escape(caption) if caption else None)
    for name, j in zip(columns, just):
        if j == "right":
            table.add_column(escape(name), justify="right", no_wrap=True)
        else:
            table.add_column(escape(name), justify="left", overflow="fold")
    for i, row in enumerate(rows):
        style = styles[i] if styles is not None and i < len(styles) else None
        table.add_row(*(escape(_cell(v)) for v in row), style=style)
    if is_tty(stream):
        Console(file=stream, highlight=False).print(table)
        return
    # ATTNUM_TABLE=rich into a file or a pipe: rich pads every line to its width; keep only what is there.
    import io

    buf = io.StringIO()
    Console(file=buf, highlight=False).print(table)
    print("\n".join(line.rstrip() for line in buf.getvalue().splitlines()), file=stream, flush=True)


def say(text: str, stream: TextIO | None = None) -> None:
    """A line beside a table: printed as is (never re-wrapped at 80 columns, never read as markup)."""
    print(text, file=sys.stdout if stream is None else stream, flush=True)


PROSE_WIDTH = 160  # the widest line of prose attnum prints on a terminal


def say_prose(text: str, stream: TextIO | None = None) -> None:
    """A sentence or paragraph: on a terminal wrapped at its width (at most :data:`PROSE_WIDTH`); in a pipe
    or a file one line, whole, as :func:`say` (a program reading it gets each sentence on one line)."""
    import shutil
    import textwrap

    out = sys.stdout if stream is None else stream
    tty = getattr(out, "isatty", lambda: False)()
    if tty and len(text) > PROSE_WIDTH:
        text = textwrap.fill(text, width=min(PROSE_WIDTH, shutil.get_terminal_size((PROSE_WIDTH, 24)).columns),
                             break_on_hyphens=False, subsequent_indent="  ")
    print(text, file=out, flush=True)
