"""Shared plotting conventions: Agg backend, styles, seed-spread lines, PNG+SVG saving.

Conventions used by every figure: colour = format (or policy when the x axis is the format),
line style and marker = variant (fa2 solid with circles, fa1 dashed with triangles), one panel per
policy; the line is the median over seeds and the shaded band the min..max over seeds. Errors are
drawn on log axes; a value that is not positive (an exact result) cannot sit on one and is left out
of the line rather than bending the axis into symlog. Legends say "policy" and "variant" in words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt

from attnum.store.outfile import write_atomic

VARIANT_STYLE = {"fa2": "-", "fa1": "--"}
VARIANT_MARKER = {"fa2": "o", "fa1": "^"}
VARIANT_NOTE = {"fa2": "normalise once", "fa1": "normalise every tile"}
POLICY_MARKER = {"uniform": "o", "fa2": "s", "torch-cpu": "^", "torch-eager": "D"}
POLICY_COLOR = {"uniform": "tab:purple", "fa2": "tab:green", "torch-cpu": "tab:gray", "torch-eager": "tab:brown"}
LEGEND = {"fontsize": 7, "handlelength": 3.5}
_FORMAT_COLORS = ["tab:red", "tab:orange", "tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:pink"]


def format_color(fmt: str, order: list[str]) -> str:
    return _FORMAT_COLORS[order.index(fmt) % len(_FORMAT_COLORS)] if fmt in order else "black"


def variant_style(variant: str) -> dict:
    """Line style and marker of a flash variant (fa1, fa2; others dotted)."""
    return {"linestyle": VARIANT_STYLE.get(variant, ":"), "marker": VARIANT_MARKER.get(variant, "x")}


def panels(n: int, *, title: str, width: float = 5.0, height: float = 3.8, rows: int = 1):
    """A figure with ``rows`` x ``n`` axes (always a 2-D array), titled."""
    fig, axes = plt.subplots(rows, n, figsize=(width * n, height * rows), squeeze=False)
    fig.suptitle(title)
    return fig, axes


def variant_label(variant: str) -> str:
    note = VARIANT_NOTE.get(variant)
    return f"variant {variant}" + (f" ({note})" if note else "")


def spread_line(ax, pts: list[tuple[Any, dict]], *, label: str, color: str, linestyle: str = "-",
                marker: str | None = "o", alpha: float = 1.0, lw: float = 1.6, key: str = "median",
                positive: bool = True) -> None:
    """Median over seeds as a line, min..max over seeds as a band; ``positive`` drops the points a
    log axis cannot show (exact zeros) and keeps the band's lower edge above zero."""
    if positive:
        pts = [(x, dict(s, min=s["min"] if s["min"] > 0 else s[key])) for x, s in pts if s[key] > 0]
    if not pts:
        return
    xs = [x for x, _ in pts]
    ys = [s[key] for _, s in pts]
    ax.plot(xs, ys, linestyle=linestyle, marker=marker, color=color, label=label, alpha=alpha, lw=lw, ms=4)
    if any(s["n"] > 1 for _, s in pts) and key == "median":
        ax.fill_between(xs, [s["min"] for _, s in pts], [s["max"] for _, s in pts], color=color,
                        alpha=0.15 * alpha, lw=0)


def style_legend(ax, *, formats: list[str] = (), order: list[str] = (), variants: list[str] = (),
                 extra: list[tuple[str, dict]] = ()) -> None:
    """One compact legend: a colour per format, a line style per variant, plus extra entries."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=format_color(f, list(order)), lw=2, label=f"format {f}") for f in formats]
    handles += [Line2D([], [], color="black", linestyle=VARIANT_STYLE.get(v, ":"), marker=VARIANT_MARKER.get(v, "x"),
                       label=variant_label(v)) for v in variants]
    handles += [Line2D([], [], label=label, **kw) for label, kw in extra]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **LEGEND)


def plain_log_ticks(fig) -> None:
    """Every log axis of ``fig`` labelled in plain numbers (2, 0.975, 1024, 1e-05), not 2x10^0 or 2^10;
    which ticks carry a label is still matplotlib's choice (minor ticks only on a short axis)."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x, pos=None):
            return f"{x:.4g}" if super().__call__(x, pos) else ""

    for ax in fig.get_axes():
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                base = axis.get_transform().base
                axis.set_major_formatter(Plain(base=base))
                axis.set_minor_formatter(Plain(base=base, labelOnlyBase=False))


def log_y(ax) -> None:
    """Log y axis (errors span decades); the lines hold only positive values (see spread_line)."""
    ax.set_yscale("log")


def finish(ax, *, xlabel: str, ylabel: str, title: str = "", legend: bool = True) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:  # beside the axes, never over the data
        ax.legend(ncol=1 if len(ax.get_legend_handles_labels()[0]) < 8 else 2, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **LEGEND)


def save(fig, out_dir: Path, name: str) -> list[Path]:
    """Write NAME.png and NAME.svg; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plain_log_ticks(fig)
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{name}.{ext}"
        write_atomic(path, lambda tmp, ext=ext: fig.savefig(tmp, format=ext, dpi=110, bbox_inches="tight",
                                                             metadata={"Date": None} if ext == "svg" else None))
        paths.append(path)
    plt.close(fig)
    return paths
