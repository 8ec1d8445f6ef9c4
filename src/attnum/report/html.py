"""``report.html``: one self-contained page (figures embedded as data URIs) built from the store.

It reads the store and asks every study family (:mod:`attnum.sweep.registry`) for its findings
and its part of the page (figures, sections, tables); it adds the generic per-group figures
(``report.generic``), the failed points, the runs, the environment and the spec. It names no kind
and never recomputes numerics. A small inline script marks ``<body data-figures="loaded/total">`` once
every figure has decoded, so a headless browser can check the page without a screenshot.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

from attnum.console.progress import Activity
from attnum.errors import bad_value
from attnum.report.blocks import esc as _e
from attnum.report.blocks import figure as _figure
from attnum.report.blocks import table as _table
from attnum.report.generic import generic_figures
from attnum.store.db import open_store
from attnum.store.outfile import check_output, write_atomic
from attnum.sweep.registry import ReportContext, all_findings, families, kind_metrics
from attnum.sweep.results import Row

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f2f2f2} .holds{color:#17692b;font-weight:600} .nothold{color:#a31515;font-weight:600}
.nottested{color:#777} .construct{color:#1f4e99;font-weight:600} .mixed{color:#8a5a00;font-weight:600}
table.map td.v{text-align:right;font-variant-numeric:tabular-nums} td.c-holds{background:#d8f0dc}
td.c-nothold{background:#f6d5d5} td.c-nottested{background:#eee;color:#777} td.c-construct{background:#dce6f6}
section.claim{border-top:2px solid #ddd;margin-top:1.5em} .note{color:#444;font-style:italic}
figure{margin:1em 0} img{max-width:100%;border:1px solid #ddd}
p.lead{font-size:17px;line-height:1.45;background:#f4f8fc;border-left:4px solid #1f4e99;padding:.6em 1em}
pre{background:#f7f7f7;padding:.7em;overflow-x:auto;font-size:12px} code{font-size:12px}
"""
_CHECK_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.querySelectorAll('img.figure'));
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-figures', ok + '/' + imgs.length);
  imgs.forEach(function (i) { if (!(i.complete && i.naturalWidth > 0)) i.classList.add('broken'); });
});
"""
def write_report(out_dir: str | Path) -> Path:
    """Draw the figures and write ``out_dir/report.html``; returns its path."""
    out_dir = Path(out_dir)
    with open_store(out_dir) as store:
        rows = _readable(store.rows(status=None), store.path)
        meta, envs, runs, counts = store.meta(), store.environments(), store.runs(), store.counts()
        spec = store.spec()
    check_output(out_dir / "report.html", "report.html")  # a folder of that name: one line, before drawing
    if (out_dir / "figures").exists() and not (out_dir / "figures").is_dir():
        raise bad_value("figures", str(out_dir / "figures"), "a folder (the report writes NAME.png and NAME.svg "
                        "into it); move that file aside")
    # A line per figure on a terminal, every interval off it; it counts figures, not the sweep's points.
    with Activity("report", spinner=True, unit="figures drawn") as act:
        drawn_so_far = [0]

        def step(name: str) -> None:  # figures done so far, and the one being drawn
            act.update(done=drawn_so_far[0], label=f"drawing {name}")
            drawn_so_far[0] += 1

        ctx = ReportContext(rows=rows, figures_dir=out_dir / "figures", findings=tuple(all_findings(rows)),
                            progress=step)
        shares = [family.report(ctx) for family in families() if family.report is not None]
        step("generic sweep figures")
        done = [r for r in rows if r.get("status") == "done"]
        drawn = generic_figures(done, ctx.figures_dir, kind_metrics(),
                                skip_groups=tuple(g for s in shares for g in s.groups))
    figures = {name: paths for share in shares for name, paths in share.figures.items()}
    caps = {name: cap for share in shares for name, cap in share.captions.items()}
    figures.update({name: paths for name, (paths, _cap) in drawn.items()})
    caps.update({name: cap for name, (_paths, cap) in drawn.items()})
    placed = {name for share in shares for name in share.placed}
    parts = [
        f"<h1>attnum report: {_e(meta.get('spec_name', '?'))}</h1>",
        *(section for share in shares for section in share.lead),
        f"<p>Generated {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC} from <code>{_e(out_dir)}</code>. "
        f"Points: {counts['planned']} planned, {counts['done']} done, {counts['failed']} failed, "
        f"{counts['missing']} missing.</p>",
        *(section for share in shares for section in share.sections),
        "<h2>Other figures</h2>",
        *(_figure(name, paths[0], caps) for name, paths in figures.items() if name not in placed),
        *(section for share in shares for section in share.appendix),
        _failed_table(rows),
        "<h2>Runs</h2>",
        _table(["run", "command", "status", "to run", "done", "failed", "executor", "jobs"],
               [[r["run_id"], r["command"], r["status"], r["n_todo"], r["done"], r["failed"], r["executor"],
                 r["jobs"]] for r in runs]),
        "<h2>Environment</h2>",
        *(f"<pre>{_e(json.dumps(env, indent=2, sort_keys=True))}</pre>" for env in envs.values()),
        "<h2>Spec</h2>",
        f"<p>Spec hash <code>{_e(meta.get('spec_hash'))}</code>, from <code>{_e(meta.get('spec_source'))}"
        f"</code>.</p><details><summary>canonical spec (JSON)</summary><pre>"
        f"{_e(json.dumps(spec, indent=1))}</pre></details>",
    ]
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>attnum report</title>"
            f"<style>{_CSS}</style></head><body>{''.join(parts)}<script>{_CHECK_SCRIPT}</script></body></html>")
    return write_atomic(out_dir / "report.html", page)  # a temp file renamed into place: never half written


def _readable(rows: list[Row], path) -> list[Row]:
    """The rows whose config their kind can read (:func:`attnum.sweep.registry.readable_config`), configs
    completed; each other one named on stderr and left out, as the store skips a row of the wrong shape
    (a store written by hand must not end the report in a traceback)."""
    from attnum.sweep.registry import UnreadableRow, readable_config

    out = []
    for r in rows:
        try:
            out.append({**r, "config": readable_config(r)})
        except UnreadableRow as why:
            print(f"attnum: warning: {path}: row (key {str(r.get('key'))[:80]!r}): {why}; row skipped",
                  file=sys.stderr)
    return out


def _failed_table(rows: list[Row]) -> str:
    bad = [r for r in rows if r["status"] == "failed"]
    if not bad:
        return ""
    body = [[r["kind"], json.dumps({k: v for k, v in r["config"].items() if v is not None}), r["error"]] for r in bad]
    return "<h2>Failed points</h2>" + _table(["kind", "config", "error"], body)
