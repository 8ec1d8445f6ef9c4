"""``report.html``: one self-contained page (figures embedded as data URIs) built from the store.

It reads the store, draws the figures (``report.figures``), computes the findings from the rows
(``experiments.findings``) and writes tables, the spec and the environment. It never recomputes
numerics. Findings come first, at a glance (one verdict per claim, policy and variant), then one
section per claim: where it holds and where it flips (a map over the grid's cells), with the
figures that show it. A small inline script marks ``<body data-figures="loaded/total">`` once
every figure has decoded, so a headless browser can check the page without a screenshot.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
from pathlib import Path
from typing import Any

from attnum.errors import bad_value
from attnum.experiments.findings import ClaimMap, compute_findings, compute_maps
from attnum.experiments.results import Row, metric, seed_summary
from attnum.outfile import check_output, write_atomic
from attnum.report import inference as inference_report
from attnum.report.figures import captions, draw_all
from attnum.store import open_store

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
_SUMMARY_METRICS = ("flash_vs_golden.max_abs", "baseline_vs_golden.max_abs", "flash_vs_baseline.max_abs", "ratio.max_abs")


def write_report(out_dir: str | Path) -> Path:
    """Draw the figures and write ``out_dir/report.html``; returns its path."""
    out_dir = Path(out_dir)
    with open_store(out_dir) as store:
        rows = store.rows(status=None)
        meta, envs, runs, counts = store.meta(), store.environments(), store.runs(), store.counts()
        spec = store.spec()
    check_output(out_dir / "report.html", "report.html")  # a folder of that name: one line, before drawing
    if (out_dir / "figures").exists() and not (out_dir / "figures").is_dir():
        raise bad_value("figures", str(out_dir / "figures"), "a folder (the report writes NAME.png and NAME.svg "
                        "into it); move that file aside")
    figures = draw_all(rows, out_dir / "figures")
    caps = captions(rows)
    maps = compute_maps(rows)
    if inference_report.only(rows):  # an inference store: the paper's claims have no cell to judge
        maps = [m for m in maps if any(c.verdict != "not tested" for c in m.cells)]
    findings = compute_findings(rows, maps)
    placed = {name for m in maps for name in _claim_figures(m.claim_id, figures)}
    parts = [
        f"<h1>attnum report: {_e(meta.get('spec_name', '?'))}</h1>",
        f"<p>Generated {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC} from <code>{_e(out_dir)}</code>. "
        f"Points: {counts['planned']} planned, {counts['done']} done, {counts['failed']} failed, "
        f"{counts['missing']} missing.</p>",
        "<h2>Findings</h2>",
        "<p>Each of the paper's claims checked against these results, per policy (where each rounding site "
        "rounds) and variant (fa1: normalise every tile; fa2: normalise once). Verdicts and numbers are "
        "computed from the data (rules in <code>attnum.experiments.findings</code>); <i>mixed</i> means the "
        "claim holds in some cells of the grid and not in others (see its map).</p>",
        _glance(findings),
        *(_claim_section(m, [f for f in findings if f.claim_id == m.claim_id], figures, caps) for m in maps),
        inference_report.section(rows, findings),
        "<h2>Other figures</h2>",
        *(_figure(name, paths[0], caps) for name, paths in figures.items() if name not in placed),
        "<h2>Real kernels</h2>",
        _kernel_table(rows),
        "<h2>Results by group</h2>",
        *(_group_table(rows, g) for g in _groups(rows)),
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


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return _e(x)


def _table(head: list[str], body: list[list[Any]], raw_cols: tuple[int, ...] = ()) -> str:
    if not body:
        return "<p><em>none</em></p>"
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    trs = "".join(
        "<tr>" + "".join(f"<td>{c if i in raw_cols else _num(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in body
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


_CSS_CLASS = {"holds": "holds", "does not hold": "nothold", "not tested": "nottested",
              "holds by construction": "construct", "mixed": "mixed"}
# The figures that show each claim, in the order they are placed in its section.
_CLAIM_FIGURES = {"mantissa": ("fig3",), "ten_x": ("fig4", "grid", "budget-"), "seq_len": ("fig5",),
                  "swap": ("fig6a",), "square": ("fig6b",), "tiles": ("fig6c",)}


def _verdict(v: str) -> str:
    return f"<span class='{_CSS_CLASS[v]}'>{_e(v)}</span>"


def _claim_figures(claim_id: str, figures: dict) -> list[str]:
    out = []
    for prefix in _CLAIM_FIGURES.get(claim_id, ()):
        out += [n for n in figures if (n.startswith(prefix) if prefix.endswith("-") else n == prefix)]
    return out


def _glance(findings) -> str:
    """One row per claim, one column per (policy, variant): the verdicts only."""
    cols = list(dict.fromkeys((f.policy, f.variant) for f in findings))
    claims = list(dict.fromkeys((f.claim_id, f.figure, f.claim) for f in findings))
    by = {(f.claim_id, f.policy, f.variant): f for f in findings}
    body = [[f"<a href='#claim-{cid}'>{_e(fig)}</a>", _e(claim),
             *(_verdict(by[(cid, p, v)].verdict) for p, v in cols)] for cid, fig, claim in claims]
    head = ["figure", "paper's claim", *(f"policy {p} / variant {v}" for p, v in cols)]
    return _table(head, body, raw_cols=tuple(range(len(head))))


def _claim_section(m: ClaimMap, findings, figures: dict, caps: dict) -> str:
    parts = [f"<section class='claim' id='claim-{_e(m.claim_id)}'><h3>{_e(m.figure)}: {_e(m.claim)} "
             f"&mdash; {_verdict(m.verdict)}</h3>", f"<p>{_e(m.summary())}</p>"]
    if m.note:
        parts.append(f"<p class='note'>{_e(m.note)}</p>")
    parts.append(_map_table(m))
    body = [[_e(f.policy), _e(f.variant), _verdict(f.verdict), _e(f.measured)] for f in findings]
    parts.append("<details><summary>per policy and variant</summary>"
                 + _table(["policy", "variant", "verdict", "measured"], body, raw_cols=(0, 1, 2, 3)) + "</details>")
    parts += [_figure(name, figures[name][0], caps) for name in _claim_figures(m.claim_id, figures)]
    return "".join(parts) + "</section>"


def _map_table(m: ClaimMap) -> str:
    """The claim's cells as a table: columns over Bc (or N, the group, the format: the first that
    varies), rows over the rest;
    each cell the judged value, coloured by its verdict, the full sentence on hover."""
    cells = [c for c in m.cells if c.coords]
    if not cells:
        return ""
    fields = m.fields
    varying = [f for f in fields if len({repr(c.coords[f]) for c in cells}) > 1]
    col_fields = [f for f in ("Bc", "seq_len", "group", "format") if f in varying][:1]
    row_fields = [f for f in fields if f not in col_fields]
    cols = sorted({tuple(c.coords[f] for f in col_fields) for c in cells}, key=_key)
    rows = sorted(dict.fromkeys(tuple(c.coords[f] for f in row_fields) for c in cells), key=_key)
    at = {(tuple(c.coords[f] for f in row_fields), tuple(c.coords[f] for f in col_fields)): c for c in cells}
    from attnum.experiments.cells import LABELS

    head = "".join(f"<th>{_e(LABELS.get(f, f))}</th>" for f in row_fields)
    head += "".join(f"<th>{_e(', '.join(f'{LABELS.get(f, f)}={v}' for f, v in zip(col_fields, col)))}</th>"
                    for col in cols) if col_fields else "<th>value</th>"
    trs = []
    for row in rows:
        tds = "".join(f"<td>{_e(_show(v))}</td>" for v in row)
        for col in cols:
            c = at.get((row, col))
            tds += ("<td></td>" if c is None else
                    f"<td class='v c-{_CSS_CLASS[c.verdict]}' title='{_e(c.text)}'>{_e(_num(c.value))}</td>")
        trs.append(f"<tr>{tds}</tr>")
    return (f"<p>Map: {_e(m.value_label)} per cell (green holds, red does not, blue holds by construction, "
            f"grey not tested; hover for the numbers).</p><table class='map'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(trs)}</tbody></table>")


def _show(v: Any) -> Any:
    return "same policy" if v is None else v


def _key(col: tuple) -> tuple:
    return tuple((0, x, "") if isinstance(x, (int, float)) and not isinstance(x, bool) else (1, 0, str(x))
                 for x in col)


def _figure(name: str, png: Path, caps: dict | None = None) -> str:
    data = base64.b64encode(png.read_bytes()).decode()
    caption = (caps or {}).get(name, name)
    return (f"<figure id='{_e(name)}'><img class='figure' alt='{_e(name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{_e(caption)} SVG: <code>figures/{_e(name)}.svg</code></figcaption></figure>")


def _groups(rows: list[Row]) -> list[str]:
    return list(dict.fromkeys(g for r in rows for g in r["groups"]))


def _group_table(rows: list[Row], group: str) -> str:
    """One line per config (seeds pooled): the fields that vary in the group, medians over seeds."""
    sub = [r for r in rows if group in r["groups"] and r["kind"] == "compare" and r["status"] == "done"]
    if not sub:
        return ""
    # Rows planned before a field existed lack it (stores made by older attnum), hence .get.
    names = dict.fromkeys(k for r in sub for k in r["config"])
    fields = [k for k in names if k != "seed" and len({repr(r["config"].get(k)) for r in sub}) > 1]
    buckets: dict[tuple, list[Row]] = {}
    for r in sub:
        buckets.setdefault(tuple(r["config"].get(k) for k in fields), []).append(r)
    body = []
    for key, rs in buckets.items():
        cells = list(key)
        for path in _SUMMARY_METRICS:
            xs = [v for r in rs if (v := metric(r, path)) is not None]
            cells.append(seed_summary(xs)["median"] if xs else "")
        body.append([*cells, len(rs)])
    head = [*fields, *(f"{m} (median)" for m in _SUMMARY_METRICS), "seeds"]
    return f"<details><summary>group <b>{_e(group)}</b>: {len(body)} configs</summary>{_table(head, body)}</details>"


def _kernel_table(rows: list[Row]) -> str:
    krows = [r for r in rows if r["kind"] == "kernels" and r["status"] == "done"]
    if not krows:
        return "<p><em>no real-kernel points recorded</em></p>"
    by_kernel: dict[str, dict[str, list[float]]] = {}
    unavailable: dict[str, str] = {}
    for r in krows:
        for name, res in r["metrics"]["kernels"].items():
            if not res.get("available"):
                unavailable.setdefault(name, res.get("reason", ""))
                continue
            by_kernel.setdefault(name, {}).setdefault(r["config"]["format"], []).append(res["max_abs"])
    fmts = sorted({f for d in by_kernel.values() for f in d})
    body = [[name, "available", *(max(d[f]) if f in d else "" for f in fmts)] for name, d in sorted(by_kernel.items())]
    body += [[name, f"unavailable: {reason}", *([""] * len(fmts))] for name, reason in sorted(unavailable.items())
             if name not in by_kernel]
    return ("<p>Worst max |kernel - golden| over all kernel points, per format (inputs cast to the format's "
            "torch dtype).</p>" + _table(["kernel", "status", *fmts], body))


def _failed_table(rows: list[Row]) -> str:
    bad = [r for r in rows if r["status"] == "failed"]
    if not bad:
        return ""
    body = [[r["kind"], json.dumps({k: v for k, v in r["config"].items() if v is not None}), r["error"]] for r in bad]
    return "<h2>Failed points</h2>" + _table(["kind", "config", "error"], body)
