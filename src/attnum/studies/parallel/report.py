"""Figures and a standalone report.html for ``attnum ring --out DIR``.

A section of its own (not part of the sweep report): it draws the result dicts those commands write
(``ring.json``, ``allreduce.json``), never the numerics.
"""

from __future__ import annotations

from pathlib import Path

from attnum.report.page import embedded_png as _svg_free_png
from attnum.report.page import html_table as _table
from attnum.report.page import standalone_page as _page
from attnum.report.plotting import finish, format_color, panels, save
from attnum.store.jsonout import dumps
from attnum.store.outfile import write_atomic


def ring_figure(rows: list[dict], out: Path) -> Path:
    """Mean |ring - golden| against shards, one line per (layout, merge policy). (The max is set by
    the first causal rows, one key each, and is the same for every configuration.)"""
    fig, ax = panels(1, title="Ring attention: deviation from the fp64 golden", width=6.5)
    ax = ax[0, 0]
    keys = list(dict.fromkeys((r["layout"], r["merge_policy"]) for r in rows))
    pols = list(dict.fromkeys(r["merge_policy"] for r in rows))
    for layout, pol in keys:
        pts = sorted((r["shards"], r["mean_abs"]) for r in rows if (r["layout"], r["merge_policy"]) == (layout, pol))
        ax.plot([p for p, _ in pts], [v for _, v in pts], "-o" if layout == "contiguous" else "--s",
                color=format_color(pol, pols), label=f"{layout}, merge {pol}")
    single = [r for r in rows if r.get("single_mean_abs") is not None]
    if single:
        ax.axhline(single[0]["single_mean_abs"], color="black", lw=1, ls=":", label="single-device flash")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    finish(ax, xlabel="shards P", ylabel="mean |O - golden|")
    return save(fig, out, "ring_deviation")[0]


def allreduce_figure(rows: list[dict], out: Path) -> Path:
    """Relative rms error of the row-parallel projection against the TP degree, one line per
    (all-reduce format, order), each starting from the unsharded layer (TP = 1)."""
    fig, ax = panels(1, title="Row-parallel projection: all-reduce deviation", width=6.5)
    ax = ax[0, 0]
    rows = [r for r in rows if r.get("study", "tp") == "tp"]
    fmts = list(dict.fromkeys(r["reduce_format"] for r in rows))
    styles = {"gloo-ring": "-o", "nccl-ring": "--s", "tree": ":^", "sequential": "-.v"}
    for fmt in fmts:
        base = [(r["tp"], r["rel_rmse"]) for r in rows if r["reduce_format"] == fmt and r["algorithm"] == "none"]
        for alg in dict.fromkeys(r["algorithm"] for r in rows if r["algorithm"] != "none"):
            pts = sorted(base + [(r["tp"], r["rel_rmse"]) for r in rows
                                 if (r["reduce_format"], r["algorithm"]) == (fmt, alg)])
            ax.plot([p for p, _ in pts], [v for _, v in pts], styles.get(alg, "-"), color=format_color(fmt, fmts),
                    label=f"all-reduce in {fmt}, {alg}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    finish(ax, xlabel="tensor-parallel degree", ylabel="rms(Y - golden) / rms(golden)")
    return save(fig, out, "tp_allreduce")[0]


def write_ring_report(result: dict, out: str | Path, allreduce: dict | None = None) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic((out / "ring.json"), dumps(result, indent=2, default=str))
    rows = result["rows"]
    sections = ["<h2>Deviation against shards, layout and merge policy</h2>", _svg_free_png(ring_figure(rows, out)),
                _table(rows, ["shards", "layout", "merge_policy", "backend", "max_abs", "mean_abs", "single_max_abs",
                              "ratio_to_single", "nan", "bit_equal_sim", "seconds"])]
    if allreduce is not None:
        write_atomic((out / "allreduce.json"), dumps(allreduce, indent=2, default=str))
        sections += ["<h2>Row-parallel output projection: reduction order</h2>",
                     _svg_free_png(allreduce_figure(allreduce["rows"], out)),
                     _table(allreduce["rows"], ["study", "tp", "dp", "algorithm", "reduce_format", "rel_max_abs",
                                                "rel_rmse", "changed"])]
    path = out / "report.html"
    write_atomic(path, _page("attnum ring: context-parallel attention", sections))
    return path
