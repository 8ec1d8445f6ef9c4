"""The recall table, from stored rows of kind ``bug-case`` (the CLI, ``--json``, the report and docs/bugs.md
read the same): per case, whether the broken version was caught (which probe, its line), whether the fixed
one stays silent (or which probe fails), and the seconds both took; and the totals."""

from __future__ import annotations

from typing import Any

from attnum.audit.bugs.corpus import Case, corpus
from attnum.audit.bugs.point import KIND

COLUMNS = ("case", "package", "versions", "broken caught?", "fixed silent?", "seconds")


def summarize(rows: list[dict[str, Any]], cases: tuple[Case, ...] | None = None) -> list[dict[str, Any]]:
    """One entry per case that has a planned point in ``rows`` (a store's rows, any status), in corpus order:
    ``{"case", "package", "versions", "symptom", "probes", "broken", "fixed", "seconds"}``, where broken / fixed
    is the point's metrics (None: open, or not run) plus its ``status`` and ``error``."""
    by_case: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r.get("kind") != KIND:
            continue
        c = r["config"]
        by_case.setdefault(c["case"], {})[c["role"]] = {**(r.get("metrics") or {}), "status": r.get("status"),
                                                         "error": r.get("error"), "target": c["target"],
                                                         "wall_s": r.get("wall_s")}
    known = {c.id: c for c in (cases or corpus())}
    out = []
    for cid in [c for c in known if c in by_case] + sorted(set(by_case) - set(known)):
        got, case = by_case[cid], known.get(cid)
        secs = sum(v.get("wall_s") or 0.0 for v in got.values() if v.get("status"))
        out.append({"case": cid, "package": case.package if case else "?", "versions": case.label() if case else "?",
                    "symptom": case.symptom if case else "", "probes": list(case.probes) if case else [],
                    "open": bool(case and case.open), "broken": got.get("broken"), "fixed": got.get("fixed"),
                    "seconds": round(secs, 1)})
    return out


def _cell(entry: dict[str, Any] | None, is_open: bool, role: str) -> str:
    if entry is None or entry.get("status") is None:
        return "open (no fixed release)" if role == "fixed" and is_open else "not run"
    if entry["status"] != "done":
        return f"ERROR: {entry.get('error')}"
    word = {"caught": "yes", "missed": "MISSED", "silent": "yes", "fails": "NO", "untested": "NOT TESTED"}
    text = f"{word.get(entry['verdict'], entry['verdict'])}: {entry['line']}"
    others = entry.get("other_failing") or []  # --all-probes: the rest of the catalogue, for context
    return text + (f" (other probes failing: {', '.join(others)})" if others else "")


def table_rows(summary: list[dict[str, Any]]) -> list[list[str]]:
    return [[s["case"], s["package"], s["versions"], _cell(s["broken"], s["open"], "broken"),
             _cell(s["fixed"], s["open"], "fixed"), f"{s['seconds']:.0f}"] for s in summary]


def totals(summary: list[dict[str, Any]]) -> dict[str, Any]:
    """Cases, caught at the broken version, fixed versions run and how many stayed silent, and the arithmetic
    the verdicts ran under."""
    ran = [s for s in summary if s["broken"] and s["broken"].get("status") == "done"]
    caught = sum(s["broken"]["verdict"] == "caught" for s in ran)
    fixed = [s for s in summary if s["fixed"] and s["fixed"].get("status") == "done"]
    silent = sum(s["fixed"]["verdict"] == "silent" for s in fixed)
    alarms = sum(s["fixed"]["verdict"] == "fails" for s in fixed)  # "untested": refused, neither silent nor failing
    numerics = sorted({v.get("numerics") for s in summary for v in (s["broken"], s["fixed"]) if v and v.get("numerics")})
    return {"cases": len(summary), "broken_run": len(ran), "caught": caught, "fixed_run": len(fixed),
            "silent": silent, "false_alarms": alarms, "untested": len(fixed) - silent - alarms, "seconds": round(sum(s["seconds"] for s in summary), 1),
            "numerics": numerics}


def failed(summary: list[dict[str, Any]]) -> bool:
    """Whether a run has a case missed, a fixed version that fails, or a point that did not finish."""
    for s in summary:
        b, f = s["broken"], s["fixed"]
        if not b or b.get("status") != "done" or b["verdict"] != "caught":
            return True
        if not s["open"] and (not f or f.get("status") != "done" or f["verdict"] != "silent"):
            return True
    return False
