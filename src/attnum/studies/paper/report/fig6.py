"""Figs. 6a-c as ratios: swapped/normal and square/default against Bc (paired points), and each Bc
against the largest, on a scale where a 1.5x effect is visible; fp64 (rounding noise near 1e-16) is left out."""

from __future__ import annotations

from pathlib import Path

from attnum.report.plotting import finish, format_color, log_y, panels, save, spread_line, style_legend, variant_style
from attnum.studies.paper.report import cells as C
from attnum.studies.paper.report.cells import tiles_of
from attnum.sweep.results import Row, metric, seed_summary, select, values


def _paired_ratio_series(rows: list[Row], flag: str) -> list[tuple[int, dict]]:
    """(Bc of the default point, seed summary of flag/default flash-vs-baseline max) per Bc."""
    by_bc: dict[int, list[float]] = {}
    rest = lambda r: tuple(sorted((k, repr(v)) for k, v in r["config"].items() if k != flag))  # noqa: E731
    off = {rest(r): r for r in rows if not r["config"].get(flag)}
    for r in rows:
        if not r["config"].get(flag) or rest(r) not in off:
            continue
        base = off[rest(r)]
        a, b = metric(r, C.FLASH_VS_BASELINE), metric(base, C.FLASH_VS_BASELINE)
        if a is not None and b:
            by_bc.setdefault(tiles_of(base)["Bc"], []).append(a / b)
    return [(bc, seed_summary(xs)) for bc, xs in sorted(by_bc.items())]


def effect_figure(rows: list[Row], out_dir: Path, group: str, flag: str, title: str) -> list[Path]:
    sub = [r for r in select(rows, group=group) if r["config"]["format"] != "fp64"]
    if not sub:
        return []
    pols, fmts = C.policies(sub), C.formats_by_mbits(sub)
    fig, axes = panels(len(pols), title=title, height=4.2)
    for ax, policy in zip(axes[0], pols):
        for fmt in fmts:
            for variant in sorted(values(sub, "variant")):
                pick = select(sub, policy=policy, format=fmt, variant=variant)
                k = fmts.index(fmt) * 2 + (variant == "fa2")  # each series nudged along x: equal lines stay visible
                dodge = 2 ** (0.06 * (k - len(fmts)))
                spread_line(ax, [(x * dodge, s) for x, s in _paired_ratio_series(pick, flag)],
                            label=f"{fmt} {variant}", color=format_color(fmt, fmts), **variant_style(variant))
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhspan(1 / 1.1, 1.1, color="gray", alpha=0.12, lw=0)
        ax.set_xscale("log", base=2)
        log_y(ax)
        finish(ax, xlabel="Bc of the default tiles", ylabel=f"{flag} / default, max |flash - baseline|",
               title=f"policy {policy}", legend=False)
    style_legend(axes[0][-1], formats=fmts, order=fmts, variants=sorted(values(sub, "variant")),
                 extra=[("no effect (1 +- 10%)", {"color": "gray", "lw": 6, "alpha": 0.3})])
    return save(fig, out_dir, group)


def fig6c_figure(rows: list[Row], out_dir: Path) -> list[Path]:
    sub = [r for r in select(rows, group="fig6c", swap_blocks=False, square=False) if r["config"]["format"] != "fp64"]
    if not sub:
        return []
    pols, fmts = C.policies(sub), C.formats_by_mbits(sub)
    fig, axes = panels(len(pols), title="Fig. 6c: block size", rows=2, height=3.6)
    for col, policy in enumerate(pols):
        for fmt in fmts:
            for variant in sorted(values(sub, "variant")):
                pick = select(sub, policy=policy, format=fmt, variant=variant)
                pts = _by_bc(pick)
                style = {"color": format_color(fmt, fmts), **variant_style(variant)}
                spread_line(axes[0][col], pts, label=f"{fmt} {variant}", **style)
                if pts:
                    ref = pts[-1][1]["median"]
                    rel = [(bc, {k: (v / ref if k in ("median", "min", "max", "mean") else v) for k, v in s.items()})
                           for bc, s in pts] if ref > 0 else []
                    spread_line(axes[1][col], rel, label=f"{fmt} {variant}", **style)
        axes[1][col].axhline(1.0, color="black", lw=0.8)
        for row, ylabel in ((0, "max |flash - baseline|"), (1, "relative to the largest Bc")):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            log_y(ax)
            finish(ax, xlabel="Bc (Br = min(Bc, d))", ylabel=ylabel, title=f"policy {policy}", legend=False)
    style_legend(axes[0][-1], formats=fmts, order=fmts, variants=sorted(values(sub, "variant")))
    return save(fig, out_dir, "fig6c")


def _by_bc(rows: list[Row], path: str = C.FLASH_VS_BASELINE) -> list[tuple[int, dict]]:
    by: dict[int, list[float]] = {}
    for r in rows:
        v, bc = metric(r, path), tiles_of(r)["Bc"]
        if v is not None and bc:
            by.setdefault(bc, []).append(v)
    return [(bc, seed_summary(xs)) for bc, xs in sorted(by.items())]
