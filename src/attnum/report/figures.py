"""The paper's figures (Figs. 3-6) and a real-kernel figure, drawn only from stored rows.

Each figure reads the rows of its spec group (``fig3``, ``fig3-e8``, ``fig3-e11``, ``fig4``,
``fig5``, ``fig6a``, ``fig6b``, ``fig6c``); a group with no rows yields no figure. Files:
``DIR/figures/NAME.png`` and ``NAME.svg``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnum.experiments.results import Row, metric, select, series, values
from attnum.report.plotting import (
    POLICY_COLOR,
    POLICY_MARKER,
    VARIANT_STYLE,
    finish,
    format_color,
    log_y,
    panels,
    save,
    spread_line,
    style_legend,
)

FVB = "flash_vs_baseline.max_abs"
FIGURE_CAPTIONS = {
    "fig3": "Fig. 3: flash vs baseline max |diff| against mantissa bits: named formats bf16..fp64, "
            "the e8mY sweep and the e11mY sweep.",
    "fig4": "Fig. 4: flash and baseline vs the fp64 golden per format (bars: median over seeds, "
            "whiskers min..max), and their ratio.",
    "fig5": "Fig. 5: sequence-length sweep at fixed tiles: (a) max |diff|, (b) mean |diff| with a "
            "+-std band, flash vs baseline.",
    "fig6a": "Fig. 6a: swapped block dimensions (solid) against the default order (faint), by block area.",
    "fig6b": "Fig. 6b: square tiles (solid) against the default tiles (faint), by block area.",
    "fig6c": "Fig. 6c: block size sweep: flash vs baseline max |diff| against block area Br*Bc.",
    "kernels": "Real kernels next to the emulation: max |diff| vs the fp64 golden at the Fig. 4 points.",
}


def draw_all(rows: list[Row], out_dir: Path) -> dict[str, list[Path]]:
    """Draw every figure the rows support; returns {figure name: [png, svg]}."""
    done = [r for r in rows if r.get("status") == "done"]
    out = {}
    for name, draw in _FIGURES.items():
        paths = draw(done, out_dir)
        if paths:
            out[name] = paths
    return out


def _mbits(rows: list[Row], fmt: str) -> float:
    return next((m for r in rows if r["config"]["format"] == fmt and (m := metric(r, "format_bits.mbits"))), 0.0)


def _formats_by_mbits(rows: list[Row]) -> list[str]:
    return sorted(values(rows, "format"), key=lambda f: (_mbits(rows, f), f))


def _policies(rows: list[Row]) -> list[str]:
    return sorted(values(rows, "policy"))


def fig3(rows: list[Row], out_dir: Path) -> list[Path]:
    groups = [("fig3", "(a) bf16 .. fp64"), ("fig3-e8", "(b) e8mY (bf16 exponent)"),
              ("fig3-e11", "(c) e11mY (fp64 exponent)")]
    groups = [(g, t) for g, t in groups if select(rows, group=g)]
    if not groups:
        return []
    fig, axes = panels(len(groups), title="Fig. 3: flash vs baseline deviation against mantissa bits")
    for ax, (group, title) in zip(axes[0], groups):
        sub = select(rows, group=group)
        for policy in _policies(sub):
            for variant in sorted(values(sub, "variant")):
                pts = series(select(sub, policy=policy, variant=variant), x="format", y=FVB, by=()).get((), [])
                pts = sorted(((_mbits(sub, f), s) for f, s in pts), key=lambda p: p[0])
                spread_line(ax, pts, label=f"{policy} {variant}", color=POLICY_COLOR.get(policy, "k"),
                            linestyle=VARIANT_STYLE.get(variant, ":"), marker=POLICY_MARKER.get(policy, "o"))
        if group == "fig3":
            fmts = _formats_by_mbits(sub)
            ax.set_xticks([_mbits(sub, f) for f in fmts], [f"{f}\n({int(_mbits(sub, f))})" for f in fmts],
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
    fmts = _formats_by_mbits(sub)
    pols = _policies(sub)
    fig, axes = panels(len(pols), title=f"Fig. 4: deviation from the fp64 golden, N={n}", rows=2)
    for col, policy in enumerate(pols):
        ax, rax = axes[0][col], axes[1][col]
        bars = [("baseline", None, "baseline_vs_golden.max_abs", "tab:red", "")]
        bars += [(f"flash {v}", v, "flash_vs_golden.max_abs", "tab:blue", "" if v == "fa2" else "//")
                 for v in sorted(values(sub, "variant"))]
        width = 0.8 / len(bars)
        for i, (label, variant, path, color, hatch) in enumerate(bars):
            pick = select(sub, policy=policy) if variant is None else select(sub, policy=policy, variant=variant)
            stats = dict(series(pick, x="format", y=path, by=()).get((), []))
            xs = [j + (i - (len(bars) - 1) / 2) * width for j, f in enumerate(fmts) if f in stats]
            med = [stats[f]["median"] for f in fmts if f in stats]
            err = [[stats[f]["median"] - stats[f]["min"] for f in fmts if f in stats],
                   [stats[f]["max"] - stats[f]["median"] for f in fmts if f in stats]]
            ax.bar(xs, med, width, yerr=err, color=color, hatch=hatch, label=label, alpha=0.85,
                   edgecolor="black", lw=0.4)
        ax.set_xticks(range(len(fmts)), fmts)
        ax.set_yscale("log")
        finish(ax, xlabel="format", ylabel="max |impl - golden|", title=f"policy {policy}")
        for variant in sorted(values(sub, "variant")):
            ratio = series(select(sub, policy=policy, variant=variant), x="format", y="ratio.max_abs", by=()).get((), [])
            pos = {f: j for j, f in enumerate(fmts)}
            spread_line(rax, [(pos[f], s) for f, s in ratio], label=f"flash {variant} / baseline",
                        color="tab:blue", linestyle=VARIANT_STYLE.get(variant, ":"))
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
    pols, fmts = _policies(sub), _formats_by_mbits(sub)
    fig, axes = panels(len(pols), title="Fig. 5: deviation against sequence length (fixed tiles)", rows=2)
    for col, policy in enumerate(pols):
        for fmt in fmts:
            for variant in sorted(values(sub, "variant")):
                pick = select(sub, policy=policy, format=fmt, variant=variant)
                style = {"color": format_color(fmt, fmts), "linestyle": VARIANT_STYLE.get(variant, ":")}
                spread_line(axes[0][col], series(pick, x="seq_len", y=FVB, by=()).get((), []),
                            label=f"{fmt} {variant}", **style)
                means = series(pick, x="seq_len", y="flash_vs_baseline.mean_abs", by=()).get((), [])
                stds = dict(series(pick, x="seq_len", y="flash_vs_baseline.std_abs", by=()).get((), []))
                spread_line(axes[1][col], means, label=f"{fmt} {variant} mean", **style)
                band = [(n, s["median"], stds[n]["median"]) for n, s in means if n in stds]
                if band:
                    axes[1][col].fill_between([b[0] for b in band], [max(b[1] - b[2], b[1] * 1e-3) for b in band],
                                              [b[1] + b[2] for b in band], color=style["color"], alpha=0.1, lw=0)
        for row, (ylabel, tag) in enumerate([("max |flash - baseline|", "(a) max"),
                                             ("mean |flash - baseline| (+-std)", "(b) mean, std")]):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            log_y(ax)
            finish(ax, xlabel="sequence length N", ylabel=ylabel, title=f"{tag}, policy {policy}", legend=False)
            if col == len(pols) - 1:
                style_legend(ax, formats=fmts, order=fmts, variants=sorted(values(sub, "variant")))
    return save(fig, out_dir, "fig5")


def _fig6(rows: list[Row], out_dir: Path, group: str, flag: str | None, title: str) -> list[Path]:
    sub = select(rows, group=group)
    if not sub:
        return []
    pols, fmts = _policies(sub), _formats_by_mbits(sub)
    fig, axes = panels(len(pols), title=title, height=4.6)
    for ax, policy in zip(axes[0], pols):
        for fmt in fmts:
            for variant in sorted(values(sub, "variant")):
                pick = select(sub, policy=policy, format=fmt, variant=variant)
                style = {"color": format_color(fmt, fmts), "linestyle": VARIANT_STYLE.get(variant, ":")}
                if flag is None:
                    pick = select(pick, swap_blocks=False, square=False)
                    spread_line(ax, series(pick, x="block_area", y=FVB, by=()).get((), []),
                                label=f"{fmt} {variant}", **style)
                    continue
                spread_line(ax, series(select(pick, **{flag: True}), x="block_area", y=FVB, by=()).get((), []),
                            label=f"{fmt} {variant} {flag}", **style)
                spread_line(ax, series(select(pick, **{flag: False}), x="block_area", y=FVB, by=()).get((), []),
                            label=f"{fmt} {variant} default", alpha=0.35, lw=1.0, marker="x", **style)
        ax.set_xscale("log", base=2)
        log_y(ax)
        finish(ax, xlabel="block area Br*Bc", ylabel="max |flash - baseline|", title=f"policy {policy}",
               legend=False)
    extra = [] if flag is None else [(flag, {"color": "gray", "lw": 2}),
                                     ("default", {"color": "gray", "lw": 1, "alpha": 0.35, "marker": "x"})]
    style_legend(axes[0][-1], formats=fmts, order=fmts, variants=sorted(values(sub, "variant")), extra=extra)
    return save(fig, out_dir, group)


def kernels(rows: list[Row], out_dir: Path) -> list[Path]:
    krows = [r for r in rows if r["kind"] == "kernels" and "fig4" in r["groups"]]
    if not krows:
        return []
    n = max(r["config"]["seq_len"] for r in krows)
    krows = [r for r in krows if r["config"]["seq_len"] == n]
    comp = select(rows, group="fig4", seq_len=n)
    fmts = sorted(values(krows, "format"), key=lambda f: (_mbits(comp, f), f))
    names = sorted({k for r in krows for k, v in r["metrics"]["kernels"].items() if v.get("available")})
    fig, axes = panels(1, title=f"Real kernels vs emulation: deviation from the fp64 golden, N={n}", width=8)
    ax = axes[0][0]
    pos = {f: j for j, f in enumerate(fmts)}
    for i, name in enumerate(names):
        pts = series(krows, x="format", y=f"kernels.{name}.max_abs", by=()).get((), [])
        spread_line(ax, [(pos[f], s) for f, s in pts], label=f"kernel {name}", color="black",
                    linestyle=("-", "--", ":", "-.")[i % 4], marker="DvP*X"[i % 5])
    for policy in _policies(comp):
        pick = select(comp, policy=policy, variant="fa2")
        pts = series(pick, x="format", y="flash_vs_golden.max_abs", by=()).get((), [])
        spread_line(ax, [(pos[f], s) for f, s in pts if f in pos], label=f"emulated flash fa2, {policy}",
                    color=POLICY_COLOR.get(policy, "k"), marker=POLICY_MARKER.get(policy, "o"))
        pts = series(pick, x="format", y="baseline_vs_golden.max_abs", by=()).get((), [])
        spread_line(ax, [(pos[f], s) for f, s in pts if f in pos], label=f"emulated baseline, {policy}",
                    color=POLICY_COLOR.get(policy, "k"), linestyle=":", marker=POLICY_MARKER.get(policy, "o"))
    ax.set_xticks(range(len(fmts)), fmts)
    log_y(ax)
    finish(ax, xlabel="format", ylabel="max |impl - golden|")
    return save(fig, out_dir, "kernels")


_FIGURES: dict[str, Callable[[list[Row], Path], list[Path]]] = {
    "fig3": fig3,
    "fig4": fig4,
    "fig5": fig5,
    "fig6a": lambda r, d: _fig6(r, d, "fig6a", "swap_blocks", "Fig. 6a: swapped block dimensions"),
    "fig6b": lambda r, d: _fig6(r, d, "fig6b", "square", "Fig. 6b: square tiles"),
    "fig6c": lambda r, d: _fig6(r, d, "fig6c", None, "Fig. 6c: block size"),
    "kernels": kernels,
}
