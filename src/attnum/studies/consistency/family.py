"""The consistency family in the registry: kind ``consistency`` (one request, every way a server computes it).

A sweep spec entry ``kind = "consistency"`` takes :class:`ConsistencyConfig`'s fields as axes (e.g. an
axis ``policy = ["fa2:bf16", "fa2:fp16"]`` or ``kv_heads = [1, 8]``); each point stores the study's
result (:func:`attnum.studies.consistency.run.run_consistency`) with the cost-of-invariance table.
Findings: per rule, "a request's decode output is bit-identical in every batch" judged on the stored
rows. The report section is :func:`attnum.studies.consistency.report.html_section` of each point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnum.studies.consistency.config import ConsistencyConfig, _ints
from attnum.sweep.point import StudyPoint
from attnum.sweep.registry import Family, Finding, ReportContext, ReportPart, StudyKind


@dataclass(frozen=True, kw_only=True)
class ConsistencyPoint(ConsistencyConfig, StudyPoint):
    """A :class:`ConsistencyConfig` as a sweep point."""

    def label(self) -> str:
        return f"consistency {self.policy} T={self.length} H={self.heads} G={self.kv_heads} d={self.head_dim}"


def _ok(check) -> Any:
    def wrapped(v: Any) -> bool:
        try:
            check(v)
        except Exception:  # noqa: BLE001 - any refusal of the value is "not allowed"
            return False
        return True

    return wrapped


def _pos(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _rules(v: Any) -> None:
    from attnum.attention.serving.split_rules import parse_split_rule

    for r in (v if isinstance(v, (list, tuple)) else str(v).split(";")):
        parse_split_rule(r)


def _policy(v: Any) -> None:
    from attnum.numerics.policy import parse_policy

    parse_policy(v)


_INTS = "one or more positive integers"
# Each axis checked on its own; the point checks the fields together (first_position < length, ...).
AXES = {
    "policy": ("a policy NAME:FORMAT (attnum.numerics.policy)", _ok(_policy)),
    **{f: ("a positive integer", _pos) for f in ("length", "first_position", "positions", "heads", "kv_heads",
                                                 "head_dim", "mixes", "co_len_min", "co_len_max")},
    "rules": ("split rules, ';'-separated (attnum.attention.serving.split_rules)", _ok(_rules)),
    **{f: (_INTS + " (a list, or the CLI's \"1,4,16\")", _ok(lambda v, f=f: _ints(f, v)))
       for f in ("batch_sizes", "chunk_sizes", "page_sizes")},
    "device": ("cpu or cuda", lambda v: v in ("cpu", "cuda")),
}


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

    sections = tuple(html_section(r["metrics"]["study"], cost=r["metrics"]["cost"], anchor=f"consistency-{i}")
                     for i, r in enumerate(_rows(ctx.rows)))
    return ReportPart(sections=sections)


def profile_spec(profile: str = "consistency", device: str = "cpu") -> Any:
    """``attnum reproduce --profile consistency``: the default point in bf16 and fp16, MHA-like (G = 8) and
    GQA (G = 2), two seeds; about a minute on 2 cores."""
    from attnum.errors import bad_value
    from attnum.sweep.spec import Group, SweepSpec

    if profile != "consistency":
        raise bad_value("--profile", profile, "consistency")
    groups = tuple(
        Group(name=f"consistency-{fmt}", points=tuple(
            ConsistencyPoint(policy=f"fa2:{fmt}", kv_heads=g, seed=seed, device=device)
            for g in (2, 8) for seed in (0, 1)))
        for fmt in ("bf16", "fp16"))
    return SweepSpec(name=profile, description="Same request, same answer? Batch invariance per split rule",
                     record=(), kernels=(), groups=groups, source=f"attnum reproduce --profile {profile}")


FAMILY = Family(
    name="consistency",
    order=6,
    kinds=(StudyKind(name="consistency", point_type=ConsistencyPoint, run=_run, axes=AXES),),
    findings=findings,
    report=report,
    profiles={"consistency": profile_spec},
)
