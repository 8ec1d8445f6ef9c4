"""`attnum export DIR --to csv|parquet`: one flat row per point (config.*, metrics.*, env.*)."""

from __future__ import annotations

from pathlib import Path

import typer

PANEL = "Store and reports"


def register(app: typer.Typer) -> None:
    @app.command()
    def export(
        out: Path = typer.Argument(..., help="A folder holding attnum.sqlite."),
        to: str = typer.Option("csv", "--to", help="csv or parquet (parquet needs pyarrow: attnum[parquet])."),
        output: Path | None = typer.Option(None, "--output", "-o", help="File to write (default DIR/points.EXT)."),
    ) -> None:
        """Write every point (done, failed and missing) as a flat table."""
        from attnum.report.export import export_points

        print(export_points(out, to=to, output=output))
