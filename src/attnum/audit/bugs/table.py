"""The recall table, from stored rows of kind ``bug-case`` (the CLI, ``--json``, the report and docs/bugs.md
read the same): per case, whether the broken version was caught (which probe, its line), whether the fixed
one stays silent (or which probe fails), and the seconds both took; and the totals."""

from __future__ import annotations

import sys
from typing import Any

from attnum.audit.bugs.corpus import Case, corpus
from attnum.audit.bugs.point import KIND

COLUMNS = ("case", "package", "versions", "broken caught?", "fixed silent?", "seconds")
VERDICTS = ("caught", "missed", "silent", "fails", "untested")


def unreadable(r: dict[str, Any]) -> str:
    """'' when the stored row ``r`` of kind ``bug-case`` holds what the table reads, else what it lacks (a store
    written by hand: a config without its case or role, a done row without a verdict and its line)."""
    c = r.get("config")
    if not isinstance(c, dict) or not isinstance(c.get("case"), str) or c.get("role") not in ("broken", "fixed"):
        return "its config names no case and role (broken or fixed)"
    if r.get("status") != "done":
        return ""
    m = r.get("metrics")
    if not isinstance(m, dict) or m.get("verdict") not in VERDICTS or not isinstance(m.get("line"), str):
        return f"its metrics hold no verdict (one of {', '.join(VERDICTS)}) and line"
    others, numerics = m.get("other_failing", []), m.get("numerics", "")
    if not isinstance(others, list) or not all(isinstance(o, str) for o in others) or not isinstance(numerics, str):
        return "its metrics' other_failing (probe names) or numerics (a label) are of another type"
    return ""


def summarize(rows: list[dict[str, Any]], cases: tuple[Case, ...] | None = None) -> list[dict[str, Any]]:
    """One entry per case that has a planned point in ``rows`` (a store's rows, any status), in corpus order:
    ``{"case", "package", "versions", "symptom", "probes", "broken", "fixed", "seconds"}``, where broken / fixed
    is the point's metrics (None: open, or not run) plus its ``status`` and ``error``. A row the table cannot read
    (:func:`unreadable`) is named on stderr and left out, as the store leaves out a row of the wrong shape."""
    by_case: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r.get("kind") != KIND:
            continue
        why = unreadable(r)
        if why:
            print(f"attnum: warning: bug-case row (key {str(r.get('key'))[:80]!r}): {why}; row skipped",
                  file=sys.stderr)
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
