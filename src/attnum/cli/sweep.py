"""`attnum sweep SPEC.toml --out DIR`: run a sweep spec into a results store (resumable)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

PANEL = "Reproduce and sweep"


def register(app: typer.Typer) -> None:
    @app.command()
    def sweep(
        spec: Path = typer.Argument(..., help="Sweep spec (TOML): axes, points, comparisons to record."),
        out: Path = typer.Option(..., "--out", help="Output folder; holds attnum.sqlite. Re-run to resume."),
        jobs: int = typer.Option(1, "--jobs", help="Points run in parallel (processes, or Ray CPUs)."),
        executor: str = typer.Option("local", "--executor", help="local (processes) or ray (RAY_ADDRESS or local)."),
        quiet: bool = typer.Option(False, "--quiet", help="Plain log lines instead of a progress bar."),
        report: bool = typer.Option(False, "--report/--no-report", help="Write figures and report.html after."),
    ) -> None:
        """Run every point of SPEC not yet done in OUT; each point is committed as it finishes."""
        from attnum.errors import AttnumInputError
        from attnum.store.outdir import check_out_folder

        if not spec.is_file():  # before torch and the studies load: a mistake is the first and only line
            raise AttnumInputError(f"spec={str(spec)!r} is not allowed; expected an existing TOML file "
                                   f"({'it is a folder' if spec.is_dir() else 'no such file'})")
        from attnum.sweep.executors import SweepOptions, run_sweep
        from attnum.sweep.spec import load_spec

        check_out_folder(out)  # a file, or x.sqlite: refused before anything runs
        sweep_spec = load_spec(spec)  # invalid specs fail here, before any point runs
        options = SweepOptions(out=out, jobs=jobs, executor=executor, quiet=quiet,
                               command=" ".join(["attnum", *sys.argv[1:]]))
        summary = run_sweep(sweep_spec, options)
        print(f"{summary.planned} points planned, {summary.skipped} already done, {summary.ran} run, "
              f"{summary.failed} failed -> {summary.store_path}")
        if report:
            from attnum.report.html import write_report

            print(f"report: {write_report(out)}")
