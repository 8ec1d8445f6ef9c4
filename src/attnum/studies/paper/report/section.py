"""The paper family's part of ``report.html``: the findings at a glance (one verdict per claim, policy
and variant), one section per claim (where it holds and where it flips: a map over the grid's cells,
with the figures that show it), then the real kernels and the results by group. It reads rows and
draws; it never recomputes numerics.
"""

from __future__ import annotations

import re
from typing import Any

from attnum.report.blocks import CSS_CLASS as _CSS_CLASS
from attnum.report.blocks import esc as _e
from attnum.report.blocks import figure as _figure
from attnum.report.blocks import num as _num
from attnum.report.blocks import table as _table
from attnum.report.blocks import verdict as _verdict
from attnum.studies.paper.report.figures import PAPER_GROUPS, captions, draw_all
from attnum.studies.paper.report.findings import ClaimMap, compute_maps
from attnum.studies.paper.report.headline import GLOSSARY, paper_headline, paper_in_short
from attnum.studies.paper.report.mma_cells import EXACT, mma_cells, mma_sentence
from attnum.sweep.registry import ReportContext, ReportPart
from attnum.sweep.results import Row, metric, seed_summary

KINDS = ("compare", "attribute", "kernels")
_SUMMARY_METRICS = ("flash_vs_golden.max_abs", "baseline_vs_golden.max_abs", "flash_vs_baseline.max_abs", "ratio.max_abs")
# The figures that show each claim, in the order they are placed in its section.
_CLAIM_FIGURES = {"mantissa": ("fig3",), "ten_x": ("fig4", "grid", "budget-"), "seq_len": ("fig5",),
                  "swap": ("fig6a",), "square": ("fig6b",), "tiles": ("fig6c",)}




def report(ctx: ReportContext) -> ReportPart:
    """Figures, findings sections and tables of the paper's rows ('' sections when the store has none)."""
    figures = draw_all(ctx.rows, ctx.figures_dir, progress=ctx.progress)
    caps = captions(ctx.rows)
    if not any(r.get("kind") in KINDS for r in ctx.rows):
        return ReportPart(figures=figures, captions=caps, groups=PAPER_GROUPS)
    maps = compute_maps(ctx.rows)
    findings = [f for f in ctx.findings if f.claim_id in {m.claim_id for m in maps}]
    placed = frozenset(name for m in maps for name in _claim_figures(m.claim_id, figures))
    headline = paper_headline(maps)
    lead_fig = "grid" if headline and "grid" in figures else None
    lead = (f"<section id='headline'>{lead_html(paper_in_short(maps), headline)}"
            + (_figure(lead_fig, figures[lead_fig][0], caps) if lead_fig else "") + "</section>",) if headline else ()
    sections = (
        "<h2>Findings</h2>",
        "<p>Each of the paper's claims checked against these results, per policy (where each rounding site "
        "rounds) and variant (fa1: normalise every tile; fa2: normalise once). Verdicts and numbers are "
        "computed from the data (rules in <code>attnum.studies.paper.report.findings</code>); <i>mixed</i> means the "
        "claim holds in some cells of the grid and not in others (see its map).</p>",
        _glance(findings),
        *(_claim_section(m, [f for f in findings if f.claim_id == m.claim_id], figures, caps, shown=lead_fig)
          for m in maps),
        *_mma_section(ctx.rows),
    )
    appendix = ("<h2>Real kernels</h2>", _kernel_table(ctx.rows), "<h2>Results by group</h2>",
                *(_group_table(ctx.rows, g) for g in _groups(ctx.rows)))
    return ReportPart(figures=figures, captions=caps, lead=lead, sections=sections, appendix=appendix, placed=placed,
                      groups=PAPER_GROUPS)


def lead_html(short: str, headline: list[str]) -> str:
    """The report's first screen: the plain "In short" sentence, a line defining the terms (each also a
    hover on its first use), then the detailed paragraph with every number."""
    used = [t for t in GLOSSARY if re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", " ".join([short, *headline]))]
    terms = "; ".join(f"<b>{_e(t)}</b>: {_e(GLOSSARY[t])}" for t in used)
    seen: set[str] = set()
    return (f"<p class='lead'>{_with_terms(short, seen)}</p>"
            + (f"<p class='terms'>Terms: {terms}.</p>" if terms else "")
            + f"<p class='detail'>{_with_terms(' '.join(headline), seen)}</p>")


def _with_terms(text: str, seen: set[str]) -> str:
    """``text`` escaped, with the first use of each glossary term not in ``seen`` as <abbr title=...>
    (``seen`` gains the terms marked)."""
    out = _e(text)
    for term, meaning in GLOSSARY.items():
        if term in seen:
            continue
        marked = re.sub(rf"(?<![\w-]){re.escape(term)}(?![\w-])",
                        lambda m, t=term, d=meaning: f"<abbr title='{_e(d)}'>{t}</abbr>", out, count=1)
        if marked != out:
            seen.add(term)
            out = marked
    return out


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


def _claim_section(m: ClaimMap, findings, figures: dict, caps: dict, shown: str | None = None) -> str:
    parts = [f"<section class='claim' id='claim-{_e(m.claim_id)}'><h3>{_e(m.figure)}: {_e(m.claim)} "
             f"&mdash; {_verdict(m.verdict)}</h3>", f"<p>{_e(m.summary())}</p>"]
    if m.note:
        parts.append(f"<p class='note'>{_e(m.note)}</p>")
    parts.append(_map_table(m))
    body = [[_e(f.policy), _e(f.variant), _verdict(f.verdict), _e(f.measured)] for f in findings]
    parts.append("<details><summary>per policy and variant</summary>"
                 + _table(["policy", "variant", "verdict", "measured"], body, raw_cols=(0, 1, 2, 3)) + "</details>")
    for name in _claim_figures(m.claim_id, figures):
        parts.append(f"<p>The {_e(name)} figure is at <a href='#headline'>the top of this page</a>.</p>"
                     if name == shown else _figure(name, figures[name][0], caps))
    return "".join(parts) + "</section>"


def _mma_section(rows: list[Row]) -> tuple[str, ...]:
    """The headline's cells under the tensor-core models (group grid-mma), beside the exact model."""
    from attnum.studies.paper.report.findings import TEN_X_BAND

    cells = mma_cells(rows)
    if not cells:
        return ()
    models = list(cells[0].ratio)
    head = ["policy", "variant", "N", "Bc", "seeds", *(f"ratio, {m}" for m in models),
            *(f"flash max error, {m}" for m in models)]
    body = [[*c.coords, len(c.seeds), *(c.ratio[m] for m in models), *(c.flash_err[m] for m in models)]
            for c in cells]
    return ("<h2>Tensor cores</h2>",
            f"<p>The Fig. 4 number (median per-seed ratio of flash's to the baseline's max error against the fp64 "
            f"golden) of a few grid cells with both matmuls run as each GPU's tensor-core instructions "
            f"(<code>mma</code>; {_e(EXACT)}: the policies' own model). {_e(mma_sentence(cells, TEN_X_BAND[0]))}</p>",
            _table(head, body))


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
    from attnum.studies.paper.report.cells import LABELS

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
