"""``attnum audit TARGET``: adversarial probes against a float64 golden, with FA's verdict rule.

Exit status: 0 every probe passed, 1 any probe failed or errored, 2 usage error, 3 nothing was
tested: the target is unavailable here (package or device missing) or refused every case.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

EXIT_UNAVAILABLE = 3


def register(app: typer.Typer) -> None:
    @app.command("audit")
    def audit(
        target: str = typer.Argument(..., help="package.module:function, path/file.py:function, or a built-in "
                                               "(torch-sdpa, torch-sdpa-math, torch-sdpa-flash, torch-sdpa-efficient, "
                                               "torch-sdpa-cudnn, torch-flex, flash-attn, flashinfer, xformers)"),
        dtype: str = typer.Option("bf16,fp16,fp32", "--dtype", help="comma-separated: bf16, fp16, fp32"),
        device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
        probes: str | None = typer.Option(None, "--probes", help="comma-separated probe names (default: all)"),
        strict: bool = typer.Option(False, "--strict", help="behaviour probes (NaN in masked K/V, determinism, "
                                                            "batch invariance) fail instead of noting"),
        k: float = typer.Option(2.0, "--k", help="fail when err > k x baseline err + floor"),
        k_grad: float = typer.Option(5.0, "--k-grad", help="the multiplier for gradients"),
        floor_ulps: float = typer.Option(2.0, "--floor-ulps", help="floor, in ULPs of the dtype at the output's scale"),
        empty_rows: str = typer.Option("zeros", "--empty-rows", help="expected output of fully masked rows: zeros or nan"),
        seed: int = typer.Option(0, "--seed"),
        as_json: bool = typer.Option(False, "--json", help="print the JSON document instead of the table"),
        html_file: Path | None = typer.Option(None, "--html", help="also write an HTML report here"),
        list_probes: bool = typer.Option(False, "--list", help="list the probes and exit"),
    ) -> int:
        """Audit an attention kernel for silent numerical bugs (exit 0 pass, 1 fail, 2 usage, 3 unavailable)."""
        from rich.console import Console

        from attnum.audit.config import AuditConfig
        from attnum.audit.report import print_table, to_html, to_json
        from attnum.audit.runner import run_audit

        console = Console(stderr=as_json)
        if list_probes:
            from attnum.audit.probes import PROBES

            for p in PROBES.values():
                console.print(f"{p.name:24s} {p.kind:9s} {p.summary}  [dim]({', '.join(p.refs)})[/dim]")
            raise typer.Exit(0)
        cfg = AuditConfig(target=target, dtypes=dtype, device=device, probes=probes, strict=strict, k=k,
                          k_grad=k_grad, floor_ulps=floor_ulps, empty_rows=empty_rows, seed=seed)
        progress = None
        if not as_json and sys.stderr.isatty():
            progress = lambda r: console.print(f"[dim]{r.name} {r.dtype}: {r.status} ({r.seconds:.1f}s)[/dim]")
        report = run_audit(cfg, progress=progress)
        if html_file is not None:
            html_file.write_text(to_html(report), encoding="utf-8")
        if as_json:
            print(json.dumps(to_json(report), indent=2))
        else:
            print_table(report, console)
        if not report.available:
            raise typer.Exit(EXIT_UNAVAILABLE)
        raise typer.Exit(0 if report.passed else 1)
