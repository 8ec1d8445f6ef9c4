"""``attnum scan PATH... | --package NAME``: hard-coded mask sentinels and related smells in sources.

Exit status: 0 no finding at or above --min-severity, 1 some, 2 usage error or a path that cannot be
read (missing, not a file or folder, unreadable, a link loop) or no source file found.
"""

from __future__ import annotations

import sys
from dataclasses import asdict

import typer

PANEL = "Audit kernels"

_SHOWN_SKIPS = 5
WIDTH = 160  # a finding's line on a terminal (its explanation cut there); a pipe or a file gets it whole


def _fit(text: str) -> str:
    """``text`` on a terminal: at most WIDTH characters (the rest is in --json, and in a pipe or a file)."""
    if len(text) <= WIDTH or not sys.stdout.isatty():
        return text
    return text[:WIDTH - 4].rsplit(" ", 1)[0] + " ..."


def _emit(text: str) -> None:
    """Print, replacing what the terminal's encoding cannot show (a snippet may hold any character)."""
    enc = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(text.encode(enc, errors="backslashreplace").decode(enc, errors="replace"))


def register(app: typer.Typer) -> None:
    @app.command("scan")
    def scan(
        paths: list[str] | None = typer.Argument(None, help="files or folders (.py, .cu, .cuh, .cpp, .h, ...)"),
        package: str | None = typer.Option(None, "--package", help="scan an installed package's files"),
        min_severity: str = typer.Option("low", "--min-severity", help="low, medium or high"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
    ) -> int:
        """Scan Python/Triton/CUDA/C++ sources for finite "infinity" sentinels and mask smells."""
        from attnum.audit.scan.scanner import SEVERITIES, package_paths
        from attnum.audit.scan.scanner import scan as run_scan
        from attnum.errors import AttnumInputError, bad_value
        from attnum.store.jsonout import dumps

        if min_severity not in SEVERITIES:
            raise bad_value("--min-severity", min_severity, f"one of {', '.join(SEVERITIES)}")
        targets = list(paths or [])
        if package is not None:
            targets += [str(p) for p in package_paths(package)]
        if not targets:
            raise AttnumInputError("scan needs at least one PATH or --package NAME")
        from attnum.console.progress import Activity

        with Activity("scan"):  # a heartbeat in a log when a package's thousands of files take a while
            report = run_scan(targets, min_severity=min_severity)
        if as_json:
            print(dumps({"files_scanned": report.files_scanned, "min_severity": min_severity,
                         "skipped": list(report.skipped), "findings": [asdict(f) for f in report.findings]},
                        indent=2))
        else:
            for f in report.findings:
                _emit(_fit(f"{f.path}:{f.line}: {f.severity}: {f.rule}: {f.why}"))
                _emit(_fit(f"    {f.snippet}"))
            if report.skipped:
                more = len(report.skipped) - _SHOWN_SKIPS
                _emit(f"not read: {'; '.join(report.skipped[:_SHOWN_SKIPS])}"
                      + (f"; and {more} more (see --json)" if more > 0 else ""))
            _emit(f"{len(report.findings)} finding(s) at or above {min_severity} in {report.files_scanned} file(s)")
        raise typer.Exit(1 if report.findings else 0)
