"""`attnum reproduce`: the paper's microbenchmark (Figs. 3-6) end to end: sweep, figures, report."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import typer

PANEL = "Reproduce and sweep"

# Every family's profiles (attnum.sweep.registry.profiles()), spelled here so that --help does not import
# the studies (a test pins it)
PROFILES = ("quick", "full", "smoke", "inference", "inference-smoke", "consistency", "lowbit")


def register(app: typer.Typer) -> None:
    @app.command()
    def reproduce(
        profile: str = typer.Option("quick", "--profile", help=f"One of {PROFILES}: quick (the paper's figures at "
                                                               "a laptop's scale; the README's Quickstart) or full "
                                                               "(the paper's scale)."),
        out: Path = typer.Option(None, "--out", help="Output folder (default runs/PROFILE)."),
        jobs: int = typer.Option(0, "--jobs", help="Parallel points (default: all CPU cores)."),
        executor: str = typer.Option("local", "--executor", help="local or ray."),
        device: str = typer.Option("cpu", "--device", help="cpu or cuda: where every point runs."),
        quiet: bool = typer.Option(False, "--quiet", help="Plain log lines instead of a progress bar."),
    ) -> None:
        """Run the paper's sweeps (resumable), draw every figure and write report.html with findings."""
        from attnum.errors import bad_value
        from attnum.store.outdir import check_out_folder

        # The flags first, before torch and the studies load: a mistake is the first and only line.
        if profile not in PROFILES:
            raise bad_value("--profile", profile, f"one of {PROFILES}", choices=PROFILES)
        if jobs < 0:
            raise bad_value("--jobs", jobs, "a positive number of processes, or 0 for one per CPU core")
        if executor not in ("local", "ray"):
            raise bad_value("--executor", executor, "local or ray", choices=("local", "ray"))
        if device not in ("cpu", "cuda"):
            raise bad_value("--device", device, "cpu or cuda", choices=("cpu", "cuda"))
        out_dir = check_out_folder(out or Path("runs") / profile)
        from attnum.report.html import write_report
        from attnum.store.db import open_store
        from attnum.sweep.executors import SweepOptions, run_sweep
        from attnum.sweep.registry import all_findings, all_headlines, profiles

        make_spec = profiles().get(profile)
        if make_spec is None:
            raise bad_value("--profile", profile, f"one of {tuple(profiles())}", choices=profiles())
        spec = make_spec(profile, device)
        t0 = time.perf_counter()
        options = SweepOptions(out=out_dir, jobs=jobs or os.cpu_count() or 1, executor=executor, quiet=quiet,
                               command=" ".join(["attnum", *sys.argv[1:]]))
        summary = run_sweep(spec, options)
        t1 = time.perf_counter()
        report = write_report(out_dir)
        t2 = time.perf_counter()
        with open_store(out_dir) as store:
            rows = store.rows()
        from attnum.console.tables import say_prose

        for sentence in all_headlines(rows):
            say_prose(sentence)
        findings = all_findings(rows)
        for f in findings:
            say_prose(f"[{f.figure}] {f.claim} | {f.policy}/{f.variant}: {f.verdict.upper()} -- {f.measured}")
        print(f"{summary.planned} points ({summary.skipped} reused, {summary.failed} failed); sweep {t1 - t0:.1f}s, "
              f"figures+report {t2 - t1:.1f}s")
        print(f"store:   {summary.store_path}\nfigures: {out_dir / 'figures'}\nreport:  {report}")
