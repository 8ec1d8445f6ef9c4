"""Figures for any sweep: each metric against each swept axis, per group, from stored rows.

For a group (of a custom spec, or any group the paper's figures do not draw) every config field
that takes several values is a swept axis. One figure per axis, one panel per metric; one line per
combination of the *other* swept fields, so nothing is pooled silently. When those combinations are
more than :data:`MAX_LINES`, the fields with the most values are pooled (median over them, band
min..max) and the caption says which. Seeds are always summarised (median, band min..max).

Each kind draws the metrics its family registers (``StudyKind.metrics``, passed in as ``kind_metrics``:
kind -> ((path, label), ...)); the default kind's figures are named ``sweep-GROUP-AXIS``, the
others' ``sweep-GROUP-KIND-AXIS``. Kinds that register none have their own figures elsewhere. A zero (exact: a TV of 0, P = 1
equal to flash) cannot sit on the log axis and is left out, as the captions say.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from attnum.report.plotting import finish, panels, save
from attnum.sweep.registry import DEFAULT_KIND
from attnum.sweep.results import LABELS, Row, metric, seed_summary

Metrics = dict[str, tuple[tuple[str, str], ...]]

MAX_LINES = 8
_COLORS = ["tab:blue", "tab:red", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:olive"]
_STYLES = ["-", "--", ":", "-."]
_MARKERS = "os^Dv<>P"


def _compare_rows(rows: list[Row], group: str, kind: str = DEFAULT_KIND) -> list[Row]:
    return [r for r in rows if r.get("kind") == kind and group in r.get("groups", ())
            and r.get("status", "done") == "done"]


def _subsets(rows: list[Row], group: str, kind_metrics: Metrics):
    """(kind, rows of that kind in ``group``) for each kind this module draws that the group holds."""
    for kind in kind_metrics:
        sub = _compare_rows(rows, group, kind)
        if sub:
            yield kind, sub


def _groups(rows: list[Row], skip_groups: tuple[str, ...]) -> list[str]:
    return [g for g in dict.fromkeys(g for r in rows for g in r.get("groups", ())) if g not in skip_groups]


def swept_axes(rows: list[Row]) -> list[str]:
    """Config fields with more than one value among ``rows`` (seed aside)."""
    names = dict.fromkeys(k for r in rows for k in r["config"])
    return [k for k in names if k not in ("seed", "kind") and len({repr(r["config"].get(k)) for r in rows}) > 1]


def plan(rows: list[Row], axis: str) -> tuple[list[str], list[str]]:
    """(fields that get one line per value combination, fields pooled) for a figure against ``axis``."""
    others = [k for k in swept_axes(rows) if k != axis]
    count = {k: len({repr(r["config"].get(k)) for r in rows}) for k in others}
    kept, pooled = list(others), []
    while kept and math.prod(count[k] for k in kept) > MAX_LINES:
        worst = max(kept, key=lambda k: count[k])
        kept.remove(worst)
        pooled.append(worst)
    return kept, pooled


def _name(group: str, axis: str, kind: str = DEFAULT_KIND) -> str:
    return "sweep-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{group}-{axis}" if kind == DEFAULT_KIND else
                             f"{group}-{kind}-{axis}")


def _caption(group: str, axis: str, kept: list[str], pooled: list[str], kind: str = DEFAULT_KIND) -> str:
    what = "each metric" if kind == DEFAULT_KIND else f"each {kind} metric"
    text = f"Group {group}: {what} against {LABELS.get(axis, axis)}"
    text += f"; one line per {', '.join(kept)}" if kept else ""
    text += f"; pooled over {', '.join(pooled)} (median, band min..max)" if pooled else "; nothing pooled but seeds"
    if kind != DEFAULT_KIND:
        text += "; zeros (exact results) are left out of the log axis"
    return text + "."


def generic_captions(rows: list[Row], kind_metrics: Metrics, *, skip_groups: tuple[str, ...] = ()) -> dict[str, str]:
    out = {}
    for group in _groups(rows, skip_groups):
        for kind, sub in _subsets(rows, group, kind_metrics):
            for axis in swept_axes(sub):
                kept, pooled = plan(sub, axis)
                out[_name(group, axis, kind)] = _caption(group, axis, kept, pooled, kind)
    return out


def generic_figures(rows: list[Row], out_dir: Path, kind_metrics: Metrics, *,
                    skip_groups: tuple[str, ...] = ()) -> dict:
    """{name: ([png, svg], caption)} for every (group, swept axis) outside ``skip_groups``."""
    out = {}
    for group in _groups(rows, skip_groups):
        for kind, sub in _subsets(rows, group, kind_metrics):
            for axis in swept_axes(sub):
                kept, pooled = plan(sub, axis)
                name = _name(group, axis, kind)
                paths = _draw(sub, axis, kept, out_dir, name, f"group {group}", kind_metrics[kind])
                if paths:
                    out[name] = (paths, _caption(group, axis, kept, pooled, kind))
    return out


def _draw(rows: list[Row], axis: str, kept: list[str], out_dir: Path, name: str, title: str,
          metrics: tuple[tuple[str, str], ...]) -> list[Path]:
    xs_all = list(dict.fromkeys(r["config"].get(axis) for r in rows))
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs_all)
    order = sorted(xs_all) if numeric else sorted(xs_all, key=repr)
    fig, axes = panels(len(metrics), title=f"{title}: metrics against {LABELS.get(axis, axis)}", width=4.2,
                       height=3.4)
    lines: dict[tuple, list[Row]] = {}
    for r in rows:
        lines.setdefault(tuple(r["config"].get(k) for k in kept), []).append(r)
    drawn = False
    for ax, (path, ylabel) in zip(axes[0], metrics):
        for i, (key, sub) in enumerate(sorted(lines.items(), key=lambda kv: repr(kv[0]))):
            by_x: dict = {}
            for r in sub:
                v = metric(r, path)
                if v is not None and math.isfinite(v) and v > 0:
                    by_x.setdefault(r["config"].get(axis), []).append(v)
            pts = [(x if numeric else order.index(x), seed_summary(by_x[x])) for x in order if x in by_x]
            if not pts:
                continue
            label = ", ".join(f"{LABELS.get(k, k)}={v}" for k, v in zip(kept, key)) or "all"
            style = {"color": _COLORS[i % len(_COLORS)], "linestyle": _STYLES[(i // len(_COLORS)) % len(_STYLES)],
                     "marker": _MARKERS[i % len(_MARKERS)]}
            ax.plot([p[0] for p in pts], [p[1]["median"] for p in pts], label=label, ms=4, lw=1.5, **style)
            if any(p[1]["n"] > 1 for p in pts):
                ax.fill_between([p[0] for p in pts], [p[1]["min"] for p in pts], [p[1]["max"] for p in pts],
                                color=style["color"], alpha=0.12, lw=0)
            drawn = True
        if numeric and len(order) > 1 and min(order) > 0 and max(order) / min(order) >= 8:
            ax.set_xscale("log", base=2)
        if not numeric:
            ax.set_xticks(range(len(order)), [str(x) for x in order], fontsize=7, rotation=20)
        ax.set_yscale("log")
        finish(ax, xlabel=LABELS.get(axis, axis), ylabel=ylabel, legend=False)
    if not drawn:
        import matplotlib.pyplot as plt

        plt.close(fig)
        return []
    axes[0][-1].legend(*axes[0][0].get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(1.01, 1.0),
                       fontsize=7, handlelength=3.5)
    return save(fig, out_dir, name)
