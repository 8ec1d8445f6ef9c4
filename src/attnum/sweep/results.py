"""Pure helpers over stored result rows (plain dicts from the store): select, group, summarise seeds.

Shared by the findings and the figures so both read the numbers the same way. No numerics here:
only the metrics the points already recorded.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from attnum.numerics.nanmath import nan_max, nan_min
from attnum.sweep.registry import DEFAULT_KIND

Row = dict[str, Any]
# How figures and tables name a config field (the paper's letters); a field not here is its own label.
LABELS = {"seq_len": "N", "kv_len": "S", "head_dim": "d", "dist": "dist", "baseline_policy": "baseline",
          "format": "format", "policy": "policy", "variant": "variant", "Bc": "Bc", "Br": "Br", "group": "group"}


def metric(row: Row, path: str) -> float | None:
    """``metric(row, "flash_vs_golden.max_abs")``: a number from the row's metrics, or None."""
    node: Any = row.get("metrics")
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def select(rows: Iterable[Row], *, group: str | None = None, kind: str = DEFAULT_KIND, **config: Any) -> list[Row]:
    """Rows of ``kind`` in ``group`` whose config matches every given field (a value or a tuple of values)."""
    out = []
    for row in rows:
        if row.get("kind") != kind or (group is not None and group not in row.get("groups", ())):
            continue
        cfg = row["config"]
        if all((cfg.get(k) in v) if isinstance(v, tuple) else cfg.get(k) == v for k, v in config.items()):
            out.append(row)
    return out


def values(rows: Iterable[Row], field: str) -> list[Any]:
    """Distinct values of a config field, in first-seen order."""
    return list(dict.fromkeys(r["config"].get(field) for r in rows))


def block_area(row: Row) -> int | None:
    """Br * Bc as the point ran (recorded by the point runner under metrics.tiles)."""
    tiles = (row.get("metrics") or {}).get("tiles") or {}
    br, bc = tiles.get("Br"), tiles.get("Bc")
    return int(br) * int(bc) if br and bc else None


def seed_summary(xs: list[float]) -> dict[str, float]:
    """Median and spread over seeds (min, max, mean, std, n)."""
    return {
        "median": statistics.median(xs),
        "min": nan_min(xs),
        "max": nan_max(xs),
        "mean": statistics.fmean(xs),
        "std": statistics.pstdev(xs) if len(xs) > 1 else 0.0,
        "n": len(xs),
    }


def series(
    rows: Iterable[Row], *, x: str, y: str, by: tuple[str, ...]
) -> dict[tuple, list[tuple[Any, dict[str, float]]]]:
    """For each combination of ``by`` fields, points (x, seed summary of y) sorted by x.

    ``x`` is a config field or ``"block_area"``; ``y`` a metric path. Seeds (and any field not in
    ``by`` or ``x``) are pooled into the summary, so pass rows already filtered to one config.
    """
    buckets: dict[tuple, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        xv = block_area(row) if x == "block_area" else row["config"].get(x)
        yv = metric(row, y)
        if xv is None or yv is None or not math.isfinite(yv):
            continue
        buckets[tuple(row["config"].get(b) for b in by)][xv].append(yv)
    return {
        key: [(xv, seed_summary(ys)) for xv, ys in sorted(per_x.items(), key=lambda kv: _sort_key(kv[0]))]
        for key, per_x in buckets.items()
    }


def paired_ratios(rows: Iterable[Row], *, y: str, flag: str) -> list[float]:
    """y(flag=True) / y(flag=False) for rows equal in every other config field (same seed too)."""
    by_cfg: dict[tuple, dict[bool, float]] = defaultdict(dict)
    for row in rows:
        yv = metric(row, y)
        if yv is None:
            continue
        cfg = row["config"]
        rest = tuple(sorted((k, repr(v)) for k, v in cfg.items() if k != flag))
        by_cfg[rest][bool(cfg.get(flag))] = yv
    return [d[True] / d[False] for d in by_cfg.values() if True in d and False in d and d[False] > 0]


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman rank correlation (ties get average ranks); nan for fewer than 3 points.

    A constant series has no trend: 0.0 (the formula would divide by zero).
    """
    if len(xs) < 3 or len(xs) != len(ys):
        return float("nan")
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / var if var > 0 else 0.0


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def _sort_key(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))
