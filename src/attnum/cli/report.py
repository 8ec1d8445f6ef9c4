"""`attnum report DIR`: figures (PNG+SVG) and one self-contained report.html from DIR's store."""

from __future__ import annotations

from pathlib import Path

import typer

PANEL = "Store and reports"


def register(app: typer.Typer) -> None:
    @app.command()
    def report(out: Path = typer.Argument(..., help="A folder written by `attnum sweep` or `attnum reproduce`.")) -> None:
        """Draw the figures and write DIR/report.html (reads the store only; recomputes nothing)."""
        from attnum.report.html import write_report

        print(write_report(out))
