"""One point of a corpus run: a case's target at one version, audited with the case's probes, and its verdict.

The audit is ``attnum audit TARGET@VERSION --probes P --dtype D --arch A`` as the CLI runs it: isolated (the target in a
kernel server: a crash, a hang or an exit is a row, and each version gets a fresh process), under the faithful
GPU model for interpreted Triton kernels. The verdict is read from the case's probe rows only:

- at the broken version, **caught** when one case of one of them has a status the corpus case names as its
  symptom (``shows``: ``fail`` or ``unwritten`` -- a verdict on what the kernel wrote -- and ``out of bounds``
  for a bug that reads past a tensor), else **missed**, with the row that says why (``unsupported``: no case
  reached the kernel; ``pass``; ``crashed`` / ``timed out`` / ``error``: the run ended before a verdict on the
  output; a failing status that is not the symptom: another bug of the same kernel). Cases, not rows: a probe
  row carries its worst case's status, and a kernel with two bugs (SageAttention 1.0.6 reads K_scale past its
  end in causal cases, and scores phantom keys in non-causal ones) must be judged on the case that shows this one;
- at the fixed version, **silent** when none of them counts against the target (``FAILING``), else **fails**.

Every row of the audit is kept (``--all-probes`` runs the whole catalogue), with the arithmetic it ran under.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from attnum.audit.bugs.corpus import SHOWS
from attnum.audit.verdict import FAILING
from attnum.sweep.point import StudyPoint

KIND = "bug-case"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BugPoint(StudyPoint):
    """``case`` at ``role`` (broken / fixed): ``target`` (TARGET@VERSION) audited in ``dtype`` with ``probes``
    (every probe with ``all_probes``). ``entry``: a hash of the case's table entry, so that an edited case is a
    new point of the store."""

    kind: str = KIND
    case: str = ""
    role: str = "broken"
    target: str = ""
    dtype: str = "fp16"
    probes: tuple[str, ...] = ()
    all_probes: bool = False
    seed: int = 0
    shows: tuple[str, ...] = SHOWS
    numerics: str = "faithful"
    arch: str = "sm90"
    device: str = "cpu"
    entry: str = ""

    def __post_init__(self) -> None:
        if self.role not in ("broken", "fixed"):
            raise ValueError(f"{self.role=} must be 'broken' or 'fixed'")
        object.__setattr__(self, "probes", tuple(self.probes))
        object.__setattr__(self, "shows", tuple(self.shows))

    def label(self) -> str:
        return f"{self.case} {self.role} {self.target}"


def from_config(config: dict[str, Any]) -> BugPoint:
    return BugPoint(**{**config, "probes": tuple(config.get("probes", ())), "shows": tuple(config.get("shows", SHOWS))})


def _num(x: float) -> float | None:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _row(r) -> dict[str, Any]:
    return {"probe": r.name, "dtype": r.dtype, "status": r.status, "note": r.note, "target_error": _num(r.target_error),
            "bound": _num(r.bound), "ratio": _num(r.ratio), "seconds": round(r.seconds, 3),
            "cases": [{"label": c.label, "status": c.verdict.status, "note": c.verdict.note} for c in r.cases]}


def line(r: dict[str, Any]) -> str:
    """``probe dtype: status (margin): note`` of a stored row."""
    margin = f" ({r['ratio']:.0%})" if r.get("ratio") is not None and r["status"] == "pass" else ""
    return f"{r['probe']} {r['dtype']}: {r['status']}{margin}: {r['note']}"


def _symptom(r: dict[str, Any], shows: tuple[str, ...]) -> str | None:
    """The line of the first case of row ``r`` whose status is one of ``shows`` (a row stored without its cases:
    the row's own status), else None."""
    cases = r.get("cases")
    if not cases:
        return line(r) if r["status"] in shows else None
    hit = next((c for c in cases if c["status"] in shows), None)
    return None if hit is None else f"{r['probe']} {r['dtype']}: {hit['status']}: {hit['label']}: {hit['note']}"


def judge(role: str, probes: tuple[str, ...], rows: list[dict[str, Any]], available: bool, reason: str,
          shows: tuple[str, ...] = SHOWS) -> dict[str, Any]:
    """The verdict of one version from its rows (module doc): ``{"verdict", "probe", "line", "other_failing"}``."""
    mine = [r for r in rows if r["probe"] in probes]
    others = sorted({r["probe"] for r in rows if r["probe"] not in probes and r["status"] in FAILING})
    if role == "broken":
        for r in mine:
            hit = _symptom(r, shows)
            if hit is not None:
                return {"verdict": "caught", "probe": r["probe"], "line": hit, "other_failing": others}
        why = next((r for r in mine if r["status"] in FAILING), None) or next(
            (r for r in mine if r["status"] not in ("pass", "unsupported")), None) or (mine[0] if mine else None)
        text = line(why) if why is not None and available else (reason or "no row")
        return {"verdict": "missed", "probe": why["probe"] if why else "", "line": text, "other_failing": others}
    bad = next((r for r in mine if r["status"] in FAILING), None)
    if bad is not None:
        return {"verdict": "fails", "probe": bad["probe"], "line": line(bad), "other_failing": others}
    if not available:  # nothing was tested: the fixed version was not shown silent
        return {"verdict": "untested", "probe": "", "line": reason, "other_failing": others}
    best = max(mine, key=lambda r: r["ratio"] if r.get("ratio") is not None else -1.0) if mine else None
    return {"verdict": "silent", "probe": best["probe"] if best else "", "line": line(best) if best else "",
            "other_failing": others}


def run(point: BugPoint, kernels: tuple[str, ...] = ()) -> dict[str, Any]:
    """Audit the point's target (isolated) and judge it; plain data for the store."""
    from attnum.audit.config import AuditConfig
    from attnum.audit.runner import run_audit

    t0 = time.perf_counter()
    cfg = AuditConfig(target=point.target, dtypes=point.dtype, device=point.device,
                      probes=None if point.all_probes else ",".join(point.probes), seed=point.seed,
                      numerics=point.numerics, arch=point.arch, isolate=True)
    report = run_audit(cfg, isolate=True)
    rows = [_row(r) for r in report.results]
    out = judge(point.role, point.probes, rows, report.available, report.reason, point.shows)
    return {**out, "available": report.available, "reason": report.reason,
            "numerics": report.environment.get("numerics", "native"), "environment": report.environment,
            "rows": rows, "seconds": round(time.perf_counter() - t0, 2)}
