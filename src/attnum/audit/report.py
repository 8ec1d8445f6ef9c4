"""Presenting an AuditReport: a rich table, the --json document, and a standalone HTML page."""

from __future__ import annotations

import html
import math

from attnum.audit.runner import NOTHING_TESTED, AuditReport, ProbeResult
from attnum.audit.verdict import ABORTED, NEAR_BOUND, NO_MARGIN, OUT_OF_BOUNDS, Verdict
from attnum.kernels.conventions import label as alignment_label

STYLE = {"pass": "green", "fail": "bold red", "unwritten": "bold red", OUT_OF_BOUNDS: "bold red", "error": "bold magenta",
         "unsupported": "dim", "note": "yellow", **{s: "bold white on red" for s in ABORTED}}


def _num(x: float) -> str:
    return "-" if isinstance(x, float) and math.isnan(x) else f"{x:.3g}"


def _json_num(x: float) -> float:
    """Numbers as they are: attnum.store.jsonout.dumps turns NaN/inf into null with a "nonfinite" note."""
    return float(x)


WIDTH = 160  # the longest line the human view prints of its own (a table row may be wider: its values stay whole)


def fold(head: str, items: list[str], width: int = WIDTH) -> str:
    """``head`` and as many of ``items`` as fit in ``width`` characters, then ``(+N more)``."""
    shown: list[str] = []
    for i, item in enumerate(items):
        more = f" (+{len(items) - i - 1} more)" if i < len(items) - 1 else ""
        line = head + ", ".join([*shown, item]) + more
        if len(line) > width and shown:
            return head + ", ".join(shown) + f" (+{len(items) - i} more)"
        shown.append(item)
    return head + ", ".join(shown)


def conventions_line(report: AuditReport) -> str:
    """"conventions: causal top-left (default (SDPA)), empty rows zeros (declared)"; nothing for a target
    with no attention entry point (a merge of states), where neither applies."""
    c = report.conventions
    if not c or c.get("attention") is False:
        return ""
    src = c.get("source", {})
    line = (f"conventions: causal {alignment_label(c['causal_alignment'])} ({src.get('causal_alignment', '?')}), "
            f"empty rows {c['empty_rows']} ({src.get('empty_rows', '?')})")
    if c.get("emulation"):
        line += f"; judged against the emulation {c['emulation']} ({src.get('emulation', '?')})"
    return line


def margin(ratio: float) -> str:
    """error / bound as a percentage ("87%"); "-" where there is none (error, unsupported)."""
    if math.isnan(ratio):
        return "-"
    if math.isinf(ratio):
        return "inf"
    return f"{ratio * 100:.2g} %" if ratio >= 1e4 else f"{ratio:.0%}"  # 1.7e+12 %, not 1731361941868%


def verdict_text(r: ProbeResult) -> str:
    """``pass``, or ``pass (87%) near bound`` when a pass used more than NEAR_BOUND of its bound."""
    return f"{r.status} ({margin(r.ratio)}) near bound" if r.near_bound else r.status


def environment_line(report: AuditReport) -> str:
    env = report.environment
    if not env:
        return ""
    line = (f"torch {env.get('torch')}, CPU capability {env.get('cpu_capability')}, "
            f"{env.get('torch_threads')} thread(s), device {env.get('device')}")
    numerics = env.get("numerics", "native")
    return line if numerics == "native" else f"{line}, numerics {numerics}"


def to_json(report: AuditReport) -> dict:
    """``{"target", "passed", "available", "probes": [{"name", "dtype", "passed", "target_error",
    "baseline_error", "bound", "margin", "near_bound", "note", "verdict", "seconds", "cases", "numerics"}],
    "numerics", "rule", "device", "environment"}`` (+ "reason" when nothing was audited); ``numerics``
    names the arithmetic the verdicts ran under (``triton-interp:nvidia-sm90,fp-fusion`` for an interpreted
    Triton kernel, ``native`` otherwise)."""
    cfg = report.config
    doc = {
        "target": report.target,
        "passed": report.passed if report.available else None,
        "available": report.available,
        "numerics": report.environment.get("numerics", "native"),
        "probes": [{**_probe_json(r), "numerics": report.environment.get("numerics", "native")}
                   for r in report.results],
        "rule": {"k": cfg.k, "k_grad": cfg.k_grad, "floor_ulps": cfg.floor_ulps,
                 "empty_rows": report.conventions.get("empty_rows", cfg.empty_rows),
                 "strict": cfg.strict, "terms": "u_fmt + sqrt(n) * u_acc", "near_bound": NEAR_BOUND,
                 "emulation": report.conventions.get("emulation")},
        "conventions": report.conventions,
        "warnings": list(report.warnings),
        "isolated": report.isolated,
        "timeout": cfg.timeout,
        "device": cfg.device,
        "environment": report.environment,
    }
    if not report.available:
        doc["reason"] = report.reason
    return doc


def _case_json(label: str, v: Verdict) -> dict:
    return {"label": label, "verdict": v.status, "target_error": _json_num(v.target_error),
            "baseline_error": _json_num(v.baseline_error), "bound": _json_num(v.bound),
            "terms_floor": _json_num(v.terms_floor),
            "margin": None if v.status in NO_MARGIN else _json_num(v.ratio),
            "near_bound": v.near_bound, "note": v.note}


def _probe_json(r: ProbeResult) -> dict:
    return {
        "name": r.name, "dtype": r.dtype, "passed": r.passed,
        "target_error": _json_num(r.target_error), "baseline_error": _json_num(r.baseline_error),
        "bound": _json_num(r.bound), "margin": None if math.isnan(r.ratio) else _json_num(r.ratio),
        "near_bound": r.near_bound, "note": r.note, "verdict": r.status, "seconds": round(r.seconds, 3),
        "cases": [_case_json(c.label, c.verdict) for c in r.cases],
    }


def print_table(report: AuditReport, stream=None, *, show_all: bool = False) -> None:
    """The human view: the one-line summary first, one row per probe and dtype, then the environment, the
    folded rows, what the target's libraries warned, the conventions and the verdict rule (once each), and
    the summary again as the last line (for ``tail``). Rows whose every case was ``unsupported`` (the
    target cannot express the probe: the serving probes on an SDPA kernel) fold into one line per reason
    unless ``show_all``; --json and --html keep every row (attnum.console.tables: whole values in a log or
    a pipe, the terminal's width on a terminal). No line of its own is longer than :data:`WIDTH`."""
    from attnum.console.tables import print_table as emit
    from attnum.console.tables import say

    if not report.available:
        what = "" if report.reason.startswith(NOTHING_TESTED) else "unavailable - "
        say(f"{report.target}: {what}{report.reason}", stream)
        return
    say(summary(report), stream)
    shown = [r for r in report.results if show_all or r.status != "unsupported"]
    cols = ("probe", "dtype", "verdict", "target err", "baseline err", "bound", "margin", "note")
    just = ("left", "left", "left", "right", "right", "right", "right", "left")
    rows = [[r.name, r.dtype, verdict_text(r), _num(r.target_error), _num(r.baseline_error), _num(r.bound),
             margin(r.ratio), r.note] for r in shown]
    styles = ["yellow" if r.near_bound else STYLE[r.status] for r in shown]
    emit(cols, rows, title=f"attnum audit {report.target}", caption=environment_line(report), justify=just,
         styles=styles, stream=stream)
    for line in folded_lines([r for r in report.results if not show_all and r.status == "unsupported"]):
        say(line, stream)
    if report.warnings:
        say(fold(f"the target's code warned {len(report.warnings)} thing(s), not verdicts (--json has them whole): ",
                 [w[:60] for w in report.warnings]), stream)
    if conventions_line(report):
        say(conventions_line(report), stream)
    say(rule_line(report), stream)
    say(summary(report), stream)


def folded_lines(rows: list[ProbeResult]) -> list[str]:
    """The unsupported rows left out of the table: a head line, then one line per reason naming its probes
    (folded to :data:`WIDTH`; ``--all`` shows the rows, --json has each one's reason whole)."""
    if not rows:
        return []
    by_reason: dict[str, list[str]] = {}
    for r in rows:
        # the reason without the case's label ("raw logits -1e+04: ..."), so that one reason is one line
        why = (r.cases[0].verdict.note if r.cases else r.note).split(" (")[0] or "no reason given"
        names = by_reason.setdefault(_shorten(why, 100), [])
        if r.name not in names:
            names.append(r.name)
    dtypes = ", ".join(dict.fromkeys(r.dtype for r in rows))
    out = [f"{len(rows)} unsupported row(s) not shown ({dtypes}; --all shows them):"]
    for reason, names in by_reason.items():
        out.append(fold(f"  {reason}: ", names))
    return out


def _shorten(text: str, width: int) -> str:
    """``text`` cut at a word boundary to at most ``width`` characters, with "..." where it was cut."""
    if len(text) <= width:
        return text
    return text[:width - 3].rsplit(" ", 1)[0] + "..."


def summary(report: AuditReport) -> str:
    """``TARGET: PASSED (3 note, 60 pass, 57 unsupported)``: the first and the last line of the table."""
    counts: dict[str, int] = {}
    for r in report.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    near = sum(r.near_bound for r in report.results)
    if near:
        parts += f"; {near} near bound (> {NEAR_BOUND:.0%})"
    word = "PASSED" if report.passed else "FAILED"
    return f"{report.target}: {word} ({parts})"


def rule_line(report: AuditReport) -> str:
    """The verdict rule the rows were judged by (printed once, after the table)."""
    emulation = report.conventions.get("emulation")
    if emulation:  # attnum.audit.emulated: target err = |kernel - emulation|, baseline err = emulation's own
        return f"rule: |kernel - {emulation}| <= {report.config.floor_ulps:g} ulp at the output's scale " \
               f"(baseline err: {emulation}'s own error against float64)"
    return f"rule: err <= {report.config.k:g} x baseline + {report.config.floor_ulps:g} ulp + " \
           f"(u + sqrt(n) u_acc) x |terms| (gradients {report.config.k_grad:g} x)"


def to_html(report: AuditReport) -> str:
    """A self-contained page: the same table, with each probe's cases folded under it."""
    esc = html.escape
    rows = []
    for r in report.results:
        cases = "".join(
            f"<tr class='case'><td></td><td colspan=2>{esc(c.label)}</td><td>{esc(c.verdict.status)}</td>"
            f"<td>{_num(c.verdict.target_error)}</td><td>{_num(c.verdict.baseline_error)}</td>"
            f"<td>{_num(c.verdict.bound)}</td>"
            f"<td>{margin(c.verdict.ratio if c.verdict.status not in NO_MARGIN else math.nan)}</td>"
            f"<td>{esc(c.verdict.note)}</td></tr>" for c in r.cases)
        cls = "near" if r.near_bound else r.status.split()[0]
        rows.append(f"<tr class='{cls}'><td>{esc(r.name)}</td><td>{esc(r.dtype)}</td><td></td>"
                    f"<td>{esc(verdict_text(r))}</td><td>{_num(r.target_error)}</td><td>{_num(r.baseline_error)}</td>"
                    f"<td>{_num(r.bound)}</td><td>{margin(r.ratio)}</td><td>{esc(r.note)}</td></tr>{cases}")
    body = ("<p>" + esc(report.reason) + "</p>") if not report.available else (
        "<table><tr><th>probe</th><th>dtype</th><th>case</th><th>verdict</th><th>target err</th>"
        "<th>baseline err</th><th>bound</th><th>margin</th><th>note</th></tr>" + "".join(rows) + "</table>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>attnum audit</title><style>"
        "body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}tr.case{color:#666;font-size:90%}"
        "tr.fail td,tr.unwritten td,tr.out td,tr.error td,tr.crashed td,tr.exited td,tr.timed td{background:#fdd}tr.note td,tr.near td{background:#ffd}tr.pass td{background:#dfd}"
        "</style>"
        f"</head><body><h1>attnum audit {esc(report.target)}</h1><p>{esc(summary(report))}; {esc(rule_line(report))}</p>"
        f"<p>{esc(environment_line(report))}</p><p>{esc(conventions_line(report))}</p>{body}</body></html>")
