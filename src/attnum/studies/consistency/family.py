"""The consistency family in the registry: kind ``consistency`` (one request, every way a server computes it).

A sweep spec entry ``kind = "consistency"`` takes :class:`ConsistencyConfig`'s fields as axes (e.g. an
axis ``policy = ["fa2:bf16", "fa2:fp16"]`` or ``kv_heads = [1, 8]``); each point stores the study's
result (:func:`attnum.studies.consistency.run.run_consistency`) with the cost-of-invariance table.
Findings: per rule, "a request's decode output is bit-identical in every batch" judged on the stored
rows. The report section is :func:`attnum.studies.consistency.report.html_section` of each point.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from attnum.studies.consistency.config import ConsistencyConfig
from attnum.studies.point import StudyPoint
from attnum.studies.registry import Family, Finding, ReportContext, ReportPart, StudyKind


@dataclass(frozen=True, kw_only=True)
class ConsistencyPoint(ConsistencyConfig, StudyPoint):
    """A :class:`ConsistencyConfig` as a sweep point."""

    def label(self) -> str:
        return f"consistency {self.policy} T={self.length} H={self.heads} G={self.kv_heads} d={self.head_dim}"


def _axis(name: str):
    def check(v: Any) -> bool:
        try:
            ConsistencyPoint(**{name: v})
        except Exception:  # noqa: BLE001 - any refusal of the value is "not allowed"
            return False
        return True

    return (f"a valid ConsistencyConfig.{name} (see attnum consistency --help)", check)


AXES = {f.name: _axis(f.name) for f in fields(ConsistencyConfig) if f.name != "kind"}


def _run(point: ConsistencyPoint, kernels: tuple[str, ...]) -> dict[str, Any]:
    from attnum.studies.consistency.cost_table import cost_table
    from attnum.studies.consistency.run import run_consistency

    return {"study": run_consistency(point), "cost": cost_table(heads=point.heads, kv_heads=point.kv_heads,
                                                                head_dim=max(point.head_dim, 64))}


def _rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "done" and (r.get("config") or {}).get("kind") == "consistency"]


def findings(rows: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for row in _rows(rows):
        study = row["metrics"]["study"]
        for r in study["rules"]:
            worst = min(b["identical"] for b in r["batches"])
            out.append(Finding(
                claim_id=f"batch-invariant:{r['rule']}", figure="consistency",
                claim=f"{r['rule']}: a request's decode output is bit-identical in every batch",
                policy=study["config"]["policy"], variant=r["rule"],
                verdict="holds" if worst == 1.0 else "does not hold",
                measured=(f"{100 * worst:.0f}% identical at worst, max {max(b['max_ulp'] for b in r['batches']):.0f} "
                          f"ulp; knob: {', '.join(r['breaks']) or 'none'}"),
                numbers={"worst_identical": worst, "breaks": r["breaks"]}))
    return out


def report(ctx: ReportContext) -> ReportPart:
    from attnum.studies.consistency.report import html_section

    sections = tuple(html_section(r["metrics"]["study"], cost=r["metrics"]["cost"]) for r in _rows(ctx.rows))
    return ReportPart(sections=sections)


FAMILY = Family(
    name="consistency",
    kinds=(StudyKind(name="consistency", point_type=ConsistencyPoint, run=_run, axes=AXES),),
    findings=findings,
    report=report,
)
