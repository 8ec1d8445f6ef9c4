"""The bugs family in the registry: kind ``bug-case`` (one case at one version, audited), and the recall
table as its report section (drawn from the store, never recomputed)."""

from __future__ import annotations

import html
from typing import Any

from attnum.audit.bugs import point as bug_point
from attnum.audit.bugs.table import COLUMNS, summarize, table_rows, totals
from attnum.sweep.registry import Family, ReportContext, ReportPart, StudyKind


def _run(point: bug_point.BugPoint, kernels: tuple[str, ...]) -> dict[str, Any]:
    return bug_point.run(point)


def recall_line(t: dict[str, Any]) -> str:
    """``caught 12 of 15 cases at their broken release; 5 of 6 fixed releases silent`` (from :func:`totals`)."""
    return (f"caught {t['caught']} of {t['broken_run']} cases at their broken release; {t['silent']} of "
            f"{t['fixed_run']} fixed releases silent ({t['false_alarms']} failing, {t['untested']} not tested); "
            f"{t['seconds']:.0f} s of audits under {', '.join(t['numerics']) or '-'}")


def report(ctx: ReportContext) -> ReportPart:
    summary = summarize([r for r in ctx.rows if r.get("kind") == bug_point.KIND])
    if not summary:
        return ReportPart()
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in table_rows(summary))
    section = (f"<section><h2>Upstream bugs: recall of the auditor</h2><p>{html.escape(recall_line(totals(summary)))}"
               f"</p><table><tr>{head}</tr>{body}</table></section>")
    return ReportPart(sections=(section,))


FAMILY = Family(
    name="bugs",
    order=8,
    kinds=(StudyKind(name=bug_point.KIND, point_type=bug_point.BugPoint, run=_run, from_config=bug_point.from_config,
                     in_specs=False),),
    report=report,
)
