"""The error-budget bar chart of ``attnum attribute`` (one config) from its result or stored rows.

Reads the numbers the attribution recorded (``sites``, ``full``, ``floor``); never recomputes them.
Two panels, one bar pair (flash, baseline) per site on a log axis: (a) only this site rounds,
(b) only this site exact, as a fraction of the full policy's deviation; the full policy and the
floor (no site rounds) as reference lines. A site an implementation does not have (the baseline's
``rescale``) has no bar.
"""

from __future__ import annotations

from pathlib import Path

from attnum.report.plotting import panels, save
from attnum.studies.paper.report.cells import tiles_of
from attnum.sweep.results import Row

IMPL_STYLE = {"flash": {"color": "tab:blue", "hatch": ""}, "baseline": {"color": "tab:red", "hatch": "//"}}


def budget_figure(result: dict, out_dir: Path, name: str, *, title: str = "") -> list[Path]:
    """Draw ``NAME.png`` and ``NAME.svg`` into ``out_dir``; ``result`` is run_attribute's dict or a
    stored attribute row's metrics."""
    metric = result["metric"]
    sites = [s for s, r in result["sites"].items() if r["rounds"]]
    if not sites:
        return []
    fig, axes = panels(2, title=title or f"Error budget per rounding site ({metric} vs the fp64 golden)",
                       width=5.6, height=0.45 * len(sites) + 2.2)
    ys = list(range(len(sites)))
    ticks = [f"{s} ({result['sites'][s]['format']})" for s in sites]
    ax = axes[0][0]
    for i, impl in enumerate(("flash", "baseline")):
        used = [(y, result["sites"][s]["only"][impl][metric]) for y, s in zip(ys, sites)
                if impl in result["sites"][s].get("rounds_in", ("flash", "baseline"))]
        ax.barh([y + (i - 0.5) * 0.38 for y, _ in used], [max(v, 1e-300) for _, v in used], height=0.38,
                label=impl, edgecolor="black", lw=0.4, **IMPL_STYLE[impl])
    for impl, ls in (("flash", "-"), ("baseline", "--")):
        ax.axvline(result["full"][impl][metric], color=IMPL_STYLE[impl]["color"], linestyle=ls, lw=1,
                   label=f"{impl}, full policy")
    ax.axvline(result["floor"]["flash"][metric], color="gray", linestyle=":", lw=1, label="floor (no site rounds)")
    ax.set_xscale("log")
    ax.set_xlabel(f"{metric} vs golden (log)")
    ax.set_title("(a) only this site rounds", fontsize=10)
    # (b) as a fraction of the full policy's deviation: 1 = this site's rounding changes nothing.
    ax = axes[0][1]
    for i, impl in enumerate(("flash", "baseline")):
        full = result["full"][impl][metric]
        used = [(y, result["sites"][s]["without"][impl][metric] / full) for y, s in zip(ys, sites)
                if full and impl in result["sites"][s].get("rounds_in", ("flash", "baseline"))]
        ax.barh([y + (i - 0.5) * 0.38 for y, _ in used], [v for _, v in used], height=0.38, label=impl,
                edgecolor="black", lw=0.4, **IMPL_STYLE[impl])
    ax.axvline(1.0, color="black", lw=0.8, label="= full policy")
    ax.set_xlabel(f"{metric} left / full policy's (linear)")
    ax.set_title("(b) only this site exact", fontsize=10)
    for ax in axes[0]:
        ax.set_yticks(ys, ticks)
        ax.set_ylim(len(sites) - 0.5, -0.5)
        ax.grid(True, axis="x", which="major", alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)  # below the bars
    axes[0][1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return save(fig, Path(out_dir), name)


def _budget_name(row: Row) -> str:
    c = row["config"]
    return f"budget-{c['policy']}-{c['variant']}-N{c['seq_len']}-Bc{tiles_of(row)['Bc']}-s{c['seed']}".replace(",", "_")


def budget_captions(rows: list[Row]) -> dict[str, str]:
    out = {}
    for r in rows:
        if r.get("kind") == "attribute" and r.get("metrics"):
            c, m = r["config"], r["metrics"]
            base = m.get("baseline_policy")
            out[_budget_name(r)] = (f"Error budget per rounding site: policy {m.get('policy')}"
                                    + (f", baseline {base}" if base and base != m.get("policy") else "")
                                    + f", variant {c['variant']}, N={c['seq_len']}, Bc={tiles_of(r)['Bc']}, "
                                    f"{c.get('dist', 'normal')} inputs, seed {c['seed']} ({m['metric']} vs golden; "
                                    f"exact = {m['carrier']}, the carrier).")
    return out


def budget_figures(rows: list[Row], out_dir: Path) -> dict[str, tuple[list[Path], str]]:
    caps = budget_captions(rows)
    out = {}
    for r in rows:
        if r.get("kind") == "attribute" and r.get("metrics"):
            name = _budget_name(r)
            paths = budget_figure(r["metrics"], out_dir, name, title=caps[name].split(" (")[0])
            if paths:
                out[name] = (paths, caps[name])
    return out
