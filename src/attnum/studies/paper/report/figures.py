"""The paper's figures (Figs. 3-6), the grid, error budgets and a real-kernel figure, from stored rows.

Each figure reads the rows of its spec group (``fig3``, ``fig3-e8``, ``fig3-e11``, ``fig4``,
``fig5``, ``fig6a``, ``fig6b``, ``fig6c``, ``grid``, ``attribute``); a group with no rows yields no
figure. Effects (Figs. 6a-c) are drawn as ratios -- swapped/normal, square/default, and each Bc
against the largest -- on a scale where a 1.5x effect is visible; fp64, whose errors are rounding
noise at 1e-16, is kept out of those panels. Files: ``DIR/figures/NAME.png`` and ``NAME.svg``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnum.report.plotting import (
    POLICY_COLOR,
    POLICY_MARKER,
    VARIANT_MARKER,
    VARIANT_STYLE,
    finish,
    format_color,
    log_y,
    panels,
    save,
    spread_line,
    style_legend,
    variant_label,
    variant_style,
)
from attnum.studies.paper.report import cells as C
from attnum.studies.paper.report.budget_figure import budget_captions, budget_figures
from attnum.studies.paper.report.cells import tiles_of
from attnum.studies.paper.report.fig6 import effect_figure, fig6c_figure
from attnum.sweep.results import Row, select, series, values

PAPER_GROUPS = ("fig3", "fig3-e8", "fig3-e11", "fig4", "fig5", "fig6a", "fig6b", "fig6c", "grid", "grid-dist",
                "grid-mma", "eager", "attribute")
FIGURE_CAPTIONS = {
    "fig3": "Fig. 3: flash vs baseline max |diff| against mantissa bits: named formats bf16..fp64, "
            "the e8mY sweep and the e11mY sweep.",
    "fig4": "Fig. 4: flash and baseline vs the fp64 golden per format (bars: median over seeds, "
            "whiskers min..max), and their ratio (median of the per-seed ratios).",
    "fig5": "Fig. 5: sequence-length sweep at fixed tiles, flash vs baseline: (a) max |diff| relative to "
            "mean |O|, (b) absolute max |diff| (which falls as |O| shrinks with N).",
    "fig6a": "Fig. 6a: swapped/normal flash-vs-baseline max |diff| against the normal tiles' Bc (the swap sets "
             "Bc = Br = d); 1 = no effect. fp64 left out (rounding noise).",
    "fig6b": "Fig. 6b: square/default ratio against Bc; 1 = no effect (square tiles leave Bc unchanged, so the "
             "forward pass cannot change). fp64 left out.",
    "fig6c": "Fig. 6c: block size sweep: (a) flash vs baseline max |diff| against Bc, (b) the same relative to "
             "the largest Bc. fp64 left out (rounding noise).",
    "grid": "The grid: flash/baseline error ratio vs the fp64 golden (median of per-seed ratios) against N, "
            "one panel per Bc, at bf16; dotted line at 10x, the paper's figure.",
    "kernels": "Real kernels next to the emulation: max |diff| vs the fp64 golden at the Fig. 4 points "
               "(an exact result, 0, cannot sit on the log axis and is left out).",
}


def draw_all(rows: list[Row], out_dir: Path, progress=None) -> dict[str, list[Path]]:
    """Draw every figure the rows support; returns {figure name: [png, svg]} (captions: :func:`captions`).
    ``progress(name)`` is called before each figure (or group of figures) is drawn."""
    done = [r for r in rows if r.get("status") == "done"]
    step = progress or (lambda name: None)
    out = {}
    for name, draw in _FIGURES.items():
        step(name)
        paths = draw(done, out_dir)
        if paths:
            out[name] = paths
    step("error budgets")
    for name, (paths, _caption) in budget_figures(done, out_dir).items():
        out[name] = paths
    return out


def captions(rows: list[Row]) -> dict[str, str]:
    """Captions of every figure :func:`draw_all` draws for ``rows`` (without drawing)."""
    done = [r for r in rows if r.get("status") == "done"]
    out = dict(FIGURE_CAPTIONS)
    out.update({name: cap for name, cap in budget_captions(done).items()})
    return out


def fig3(rows: list[Row], out_dir: Path) -> list[Path]:
    groups = [("fig3", "(a) bf16 .. fp64"), ("fig3-e8", "(b) e8mY (bf16 exponent)"),
              ("fig3-e11", "(c) e11mY (fp64 exponent)")]
    groups = [(g, t) for g, t in groups if select(rows, group=g)]
    if not groups:
        return []
    fig, axes = panels(len(groups), title="Fig. 3: flash vs baseline deviation against mantissa bits")
    for ax, (group, title) in zip(axes[0], groups):
        sub = select(rows, group=group)
        for policy in C.policies(sub):
            for variant in sorted(values(sub, "variant")):
                pts = series(select(sub, policy=policy, variant=variant), x="format", y=C.FLASH_VS_BASELINE, by=()).get((), [])
                pts = sorted(((C.mbits(sub, f), s) for f, s in pts), key=lambda p: p[0])
                spread_line(ax, pts, label=f"policy {policy}, variant {variant}", color=POLICY_COLOR.get(policy, "k"),
                            linestyle=VARIANT_STYLE.get(variant, ":"), marker=POLICY_MARKER.get(policy, "o"))
        if group == "fig3":
            fmts = C.formats_by_mbits(sub)
            ax.set_xticks([C.mbits(sub, f) for f in fmts], [f"{f}\n({int(C.mbits(sub, f))})" for f in fmts],
                          fontsize=7)
        log_y(ax)
        finish(ax, xlabel="mantissa bits", ylabel="max |flash - baseline|", title=title)
    return save(fig, out_dir, "fig3")


def fig4(rows: list[Row], out_dir: Path) -> list[Path]:
    sub = select(rows, group="fig4")
    if not sub:
        return []
    n = max(r["config"]["seq_len"] for r in sub)
    sub = select(sub, seq_len=n)
    fmts = C.formats_by_mbits(sub)
    pols = C.policies(sub)
    fig, axes = panels(len(pols), title=f"Fig. 4: deviation from the fp64 golden, N={n}", rows=2)
    for col, policy in enumerate(pols):
        ax, rax = axes[0][col], axes[1][col]
        bars = [("baseline", None, "baseline_vs_golden.max_abs", "tab:red", "")]
        bars += [(f"flash, variant {v}", v, "flash_vs_golden.max_abs", "tab:blue" if v == "fa2" else "tab:cyan",
                  "" if v == "fa2" else "//") for v in sorted(values(sub, "variant"))]
        width = 0.8 / len(bars)
        for i, (label, variant, path, color, hatch) in enumerate(bars):
            pick = select(sub, policy=policy) if variant is None else select(sub, policy=policy, variant=variant)
            stats = dict(series(pick, x="format", y=path, by=()).get((), []))
            shown = [f for f in fmts if f in stats and stats[f]["median"] > 0]
            xs = [fmts.index(f) + (i - (len(bars) - 1) / 2) * width for f in shown]
            med = [stats[f]["median"] for f in shown]
            err = [[stats[f]["median"] - max(stats[f]["min"], 1e-300) for f in shown],
                   [stats[f]["max"] - stats[f]["median"] for f in shown]]
            ax.bar(xs, med, width, yerr=err, color=color, hatch=hatch, label=label, alpha=0.85,
                   edgecolor="black", lw=0.4)
        ax.set_xticks(range(len(fmts)), fmts)
        ax.set_yscale("log")
        finish(ax, xlabel="format", ylabel="max |impl - golden|", title=f"policy {policy}")
        pos = {f: j for j, f in enumerate(fmts)}
        for variant in sorted(values(sub, "variant")):
            ratio = series(select(sub, policy=policy, variant=variant), x="format", y="ratio.max_abs", by=()).get((), [])
            spread_line(rax, [(pos[f], s) for f, s in ratio], label=f"flash / baseline, variant {variant}",
                        color="tab:blue" if variant == "fa2" else "tab:cyan", **variant_style(variant))
        rax.axhline(1.0, color="gray", lw=0.8)
        rax.axhline(10.0, color="gray", lw=0.8, linestyle=":")
        rax.set_xticks(range(len(fmts)), fmts)
        rax.set_yscale("log")
        finish(rax, xlabel="format", ylabel="ratio flash / baseline (vs golden)")
    return save(fig, out_dir, "fig4")


def fig5(rows: list[Row], out_dir: Path) -> list[Path]:
    sub = select(rows, group="fig5")
    if not sub:
        return []
    pols, fmts = C.policies(sub), C.formats_by_mbits(sub)
    fig, axes = panels(len(pols), title="Fig. 5: deviation against sequence length (fixed tiles)", rows=2)
    for col, policy in enumerate(pols):
        for fmt in fmts:
            for variant in sorted(values(sub, "variant")):
                pick = select(sub, policy=policy, format=fmt, variant=variant)
                style = {"color": format_color(fmt, fmts), **variant_style(variant)}
                for row, path in ((0, "flash_vs_baseline.rel_max_abs"), (1, C.FLASH_VS_BASELINE)):
                    spread_line(axes[row][col], series(pick, x="seq_len", y=path, by=()).get((), []),
                                label=f"{fmt} {variant}", **style)
        for row, (ylabel, tag) in enumerate([("max |flash - baseline| / mean |O|", "(a) relative"),
                                             ("max |flash - baseline|", "(b) absolute")]):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            log_y(ax)
            finish(ax, xlabel="sequence length N", ylabel=ylabel, title=f"{tag}, policy {policy}", legend=False)
            if col == len(pols) - 1:
                style_legend(ax, formats=fmts, order=fmts, variants=sorted(values(sub, "variant")))
    return save(fig, out_dir, "fig5")


def grid(rows: list[Row], out_dir: Path) -> list[Path]:
    sub = C.unique(select(rows, group="grid") + select(rows, group="grid-dist"))
    if not sub:
        return []
    bcs = sorted({tiles_of(r)["Bc"] for r in sub})
    pols, dists = C.policies(sub), sorted(values(sub, "dist"))
    cols = 2 if len(bcs) > 2 else len(bcs)  # two panels a row: the figure of the 10x finding is read large
    fig, axes = panels(cols, rows=-(-len(bcs) // cols), width=5.5, height=4.4,
                       title="Grid: flash/baseline error vs golden (bf16) against N, per Bc")
    styles = ["-", "--", ":", "-."]
    for ax in axes.flat[len(bcs):]:
        ax.set_visible(False)
    for ax, bc in zip(axes.flat, bcs):
        for policy in pols:
            for variant in sorted(values(sub, "variant")):
                for k, dist in enumerate(dists):
                    pick = [r for r in select(sub, policy=policy, variant=variant, dist=dist) if tiles_of(r)["Bc"] == bc]
                    pts = series(pick, x="seq_len", y="ratio.max_abs", by=()).get((), [])
                    spread_line(ax, pts, label=f"policy {policy}, variant {variant}, dist {dist}",
                                color=POLICY_COLOR.get(policy, "k") if variant == "fa2" else _light(policy),
                                linestyle=styles[k % len(styles)], marker=VARIANT_MARKER.get(variant, "x"))
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhline(10.0, color="gray", lw=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        log_y(ax)
        finish(ax, xlabel="N", ylabel="flash / baseline max error", title=f"Bc = {bc}", legend=False)
    handles_ax = axes[0][-1]
    handles_ax.legend(*axes[0][0].get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(1.01, 1.0),
                      fontsize=9, handlelength=3.5)
    return save(fig, out_dir, "grid")


def _light(policy: str) -> str:
    return {"uniform": "plum", "fa2": "yellowgreen"}.get(policy, "silver")


def kernels(rows: list[Row], out_dir: Path) -> list[Path]:
    krows = [r for r in rows if r["kind"] == "kernels" and "fig4" in r["groups"]]
    if not krows:
        return []
    n = max(r["config"]["seq_len"] for r in krows)
    krows = [r for r in krows if r["config"]["seq_len"] == n]
    comp = select(rows, group="fig4", seq_len=n)
    fmts = sorted(values(krows, "format"), key=lambda f: (C.mbits(comp, f), f))
    names = sorted({k for r in krows for k, v in r["metrics"]["kernels"].items() if v.get("available")})
    fig, axes = panels(1, title=f"Real kernels vs emulation: deviation from the fp64 golden, N={n}", width=8)
    ax = axes[0][0]
    pos = {f: j for j, f in enumerate(fmts)}
    for i, name in enumerate(names):
        pts = series(krows, x="format", y=f"kernels.{name}.max_abs", by=()).get((), [])
        spread_line(ax, [(pos[f], s) for f, s in pts], label=f"kernel {name}", color="black",
                    linestyle=("-", "--", ":", "-.")[i % 4], marker="DvP*X"[i % 5])
    for policy in C.policies(comp):
        pick = select(comp, policy=policy, variant="fa2")
        pts = series(pick, x="format", y="flash_vs_golden.max_abs", by=()).get((), [])
        spread_line(ax, [(pos[f], s) for f, s in pts if f in pos], label=f"emulated flash ({variant_label('fa2')}), "
                    f"policy {policy}", color=POLICY_COLOR.get(policy, "k"), marker=POLICY_MARKER.get(policy, "o"))
        pts = series(pick, x="format", y="baseline_vs_golden.max_abs", by=()).get((), [])
        spread_line(ax, [(pos[f], s) for f, s in pts if f in pos], label=f"emulated baseline, policy {policy}",
                    color=POLICY_COLOR.get(policy, "k"), linestyle=":", marker=POLICY_MARKER.get(policy, "o"))
    ax.set_xticks(range(len(fmts)), fmts)
    log_y(ax)
    finish(ax, xlabel="format", ylabel="max |impl - golden|")
    return save(fig, out_dir, "kernels")


_FIGURES: dict[str, Callable[[list[Row], Path], list[Path]]] = {
    "fig3": fig3,
    "fig4": fig4,
    "fig5": fig5,
    "fig6a": lambda r, d: effect_figure(r, d, "fig6a", "swap_blocks", "Fig. 6a: swapped block dimensions"),
    "fig6b": lambda r, d: effect_figure(r, d, "fig6b", "square", "Fig. 6b: square tiles"),
    "fig6c": fig6c_figure,
    "grid": grid,
    "kernels": kernels,
}
