"""Presenting an AuditReport: a rich table, the --json document, and a standalone HTML page."""

from __future__ import annotations

import html
import math

from attnum.audit.runner import AuditReport, ProbeResult

STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "unsupported": "dim", "note": "yellow"}


def _num(x: float) -> str:
    return "-" if isinstance(x, float) and math.isnan(x) else f"{x:.3g}"


def _json_num(x: float):
    """JSON has no NaN/Infinity: non-finite numbers become strings ("inf", "nan")."""
    return x if math.isfinite(x) else str(x)


def to_json(report: AuditReport) -> dict:
    """``{"target", "passed", "probes": [{"name", "dtype", "passed", "target_error", "baseline_error",
    "bound", "note", "verdict", "seconds", "cases"}], ...}``."""
    cfg = report.config
    doc = {
        "target": report.target,
        "passed": report.passed if report.available else None,
        "available": report.available,
        "probes": [_probe_json(r) for r in report.results],
        "rule": {"k": cfg.k, "k_grad": cfg.k_grad, "floor_ulps": cfg.floor_ulps, "empty_rows": cfg.empty_rows,
                 "strict": cfg.strict},
        "device": cfg.device,
    }
    if not report.available:
        doc["reason"] = report.reason
    return doc


def _probe_json(r: ProbeResult) -> dict:
    return {
        "name": r.name, "dtype": r.dtype, "passed": r.passed,
        "target_error": _json_num(r.target_error), "baseline_error": _json_num(r.baseline_error),
        "bound": _json_num(r.bound), "note": r.note, "verdict": r.status, "seconds": round(r.seconds, 3),
        "cases": [{"label": c.label, "verdict": c.verdict.status, "target_error": _json_num(c.verdict.target_error),
                   "baseline_error": _json_num(c.verdict.baseline_error), "bound": _json_num(c.verdict.bound),
                   "note": c.verdict.note} for c in r.cases],
    }


def print_table(report: AuditReport, console) -> None:
    """The human view: one row per probe and dtype, then a one-line summary."""
    from rich.table import Table

    if not report.available:
        console.print(f"[yellow]{report.target}: unavailable[/yellow] - {report.reason}")
        return
    table = Table(title=f"attnum audit {report.target}", title_justify="left")
    for col, just in (("probe", "left"), ("dtype", "left"), ("verdict", "left"), ("target err", "right"),
                      ("baseline err", "right"), ("bound", "right"), ("note", "left")):
        table.add_column(col, justify=just, overflow="fold")
    for r in report.results:
        table.add_row(r.name, r.dtype, f"[{STYLE[r.status]}]{r.status}[/]", _num(r.target_error),
                      _num(r.baseline_error), _num(r.bound), r.note)
    console.print(table)
    console.print(summary(report))


def summary(report: AuditReport) -> str:
    counts: dict[str, int] = {}
    for r in report.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    word = "PASSED" if report.passed else "FAILED"
    return f"{report.target}: {word} ({parts}); rule: err <= {report.config.k:g} x baseline + " \
           f"{report.config.floor_ulps:g} ulp (gradients {report.config.k_grad:g} x)"


def to_html(report: AuditReport) -> str:
    """A self-contained page: the same table, with each probe's cases folded under it."""
    esc = html.escape
    rows = []
    for r in report.results:
        cases = "".join(
            f"<tr class='case'><td></td><td colspan=2>{esc(c.label)}</td><td>{esc(c.verdict.status)}</td>"
            f"<td>{_num(c.verdict.target_error)}</td><td>{_num(c.verdict.baseline_error)}</td>"
            f"<td>{_num(c.verdict.bound)}</td><td>{esc(c.verdict.note)}</td></tr>" for c in r.cases)
        rows.append(f"<tr class='{r.status}'><td>{esc(r.name)}</td><td>{r.dtype}</td><td></td><td>{r.status}</td>"
                    f"<td>{_num(r.target_error)}</td><td>{_num(r.baseline_error)}</td><td>{_num(r.bound)}</td>"
                    f"<td>{esc(r.note)}</td></tr>{cases}")
    body = ("<p>" + esc(report.reason) + "</p>") if not report.available else (
        "<table><tr><th>probe</th><th>dtype</th><th>case</th><th>verdict</th><th>target err</th>"
        "<th>baseline err</th><th>bound</th><th>note</th></tr>" + "".join(rows) + "</table>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>attnum audit</title><style>"
        "body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}tr.case{color:#666;font-size:90%}"
        "tr.fail td,tr.error td{background:#fdd}tr.note td{background:#ffd}tr.pass td{background:#dfd}</style>"
        f"</head><body><h1>attnum audit {esc(report.target)}</h1><p>{esc(summary(report))}</p>{body}</body></html>")
