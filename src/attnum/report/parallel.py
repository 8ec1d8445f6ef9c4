"""Figures and a standalone report.html for ``attnum spec --out DIR`` and ``attnum ring --out DIR``.

A section of its own (not part of the sweep report): it draws the result dicts those commands write
(``spec.json``, ``ring.json``, ``allreduce.json``), never the numerics.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from attnum.jsonout import dumps
from attnum.outfile import write_atomic
from attnum.report.plotting import finish, format_color, panels, save


def _svg_free_png(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}' style='max-width:100%'>"


def _table(rows: list[dict], cols: list[str]) -> str:
    def cell(v):
        if isinstance(v, float):
            return f"{v:.3e}"
        return html.escape("" if v is None else str(v))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def spec_figure(rows: list[dict], out: Path) -> Path:
    """TV to the target against k, one line per format (solid: speculative, dashed: plain sampling)."""
    fig, ax = panels(1, title="Speculative decoding: exact TV to the target", width=6.0)
    ax = ax[0, 0]
    fmts = list(dict.fromkeys(r["format"] for r in rows))
    for f in fmts:
        pts = sorted((r["k"], r) for r in rows if r["format"] == f and r.get("tv") is not None)
        if not pts:
            continue
        c = format_color(f, fmts)
        ax.plot([k for k, _ in pts], [max(r["tv"], 1e-18) for _, r in pts], "-o", color=c, label=f"{f} speculative")
        ax.plot([k for k, _ in pts], [max(r["tv_plain"], 1e-18) for _, r in pts], "--", color=c, alpha=0.6,
                label=f"{f} plain sampling")
    ax.set_yscale("log")
    finish(ax, xlabel="draft tokens k", ylabel="total variation (completed k+1 tokens)")
    return save(fig, out, "spec_tv")[0]


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


_CSS = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}")


def _page(title: str, sections: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>")


def write_spec_report(result: dict, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic((out / "spec.json"), dumps(result, indent=2, default=str))
    rows = result["rows"]
    sections = [f"<h2>TV against format and k</h2><p>config: <code>{html.escape(json.dumps(result['config'], default=str))}"
                "</code></p>"]
    if any("tv" in r for r in rows):
        sections.append(_svg_free_png(spec_figure(rows, out)))
    cols = [c for c in ("format", "k", "vocab", "tv", "tv_plain", "ratio", "tv_first", "fail", "expected_tokens",
                        "mc_tv_first", "mc_floor") if any(c in r for r in rows)]
    sections.append(_table(rows, cols))
    path = out / "report.html"
    write_atomic(path, _page("attnum spec: speculative decoding under finite precision", sections))
    return path


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
