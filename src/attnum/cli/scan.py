"""``attnum scan PATH... | --package NAME``: hard-coded mask sentinels and related smells in sources.

Exit status: 0 no finding at or above --min-severity, 1 some, 2 usage error.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import typer


def register(app: typer.Typer) -> None:
    @app.command("scan")
    def scan(
        paths: list[str] | None = typer.Argument(None, help="files or folders (.py, .cu, .cuh, .cpp, .h, ...)"),
        package: str | None = typer.Option(None, "--package", help="scan an installed package's files"),
        min_severity: str = typer.Option("low", "--min-severity", help="low, medium or high"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
    ) -> int:
        """Scan Python/Triton/CUDA/C++ sources for finite "infinity" sentinels and mask smells."""
        from attnum.audit.scan import package_paths, scan_paths
        from attnum.errors import AttnumInputError

        targets = list(paths or [])
        if package:
            targets += [str(p) for p in package_paths(package)]
        if not targets:
            raise AttnumInputError("scan needs at least one PATH or --package NAME")
        findings, n_files = scan_paths(targets, min_severity=min_severity)
        if as_json:
            print(json.dumps({"files_scanned": n_files, "min_severity": min_severity,
                              "findings": [asdict(f) for f in findings]}, indent=2))
        else:
            for f in findings:
                print(f"{f.path}:{f.line}: {f.severity}: {f.rule}: {f.why}")
                print(f"    {f.snippet}")
            print(f"{len(findings)} finding(s) at or above {min_severity} in {n_files} file(s)")
        raise typer.Exit(1 if findings else 0)
