"""Figures and one self-contained HTML page for ``attnum diverge --profile bias``.

Reads only the summary :func:`attnum.studies.training.bias.study.run_bias` produced; nothing is recomputed here.
Figures are PNGs embedded as data URIs (``img.figure``); a small script marks
``<body data-figures="loaded/total">`` once every figure decoded, so a headless browser can check
the page without a screenshot.
"""

from __future__ import annotations

import base64
import html
import statistics
from pathlib import Path

from attnum.store.outfile import save_figure, write_atomic

COLORS = {"fp32": "black", "uniform-bf16": "tab:red", "uniform-qy": "tab:blue", "fa2-bf16": "tab:green"}
_CHECK = """window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.querySelectorAll('img.figure'));
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-figures', ok + '/' + imgs.length);
});"""
_CSS = ("body{font-family:sans-serif;max-width:64em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}img{max-width:100%}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, stem: str) -> Path:
    path = out / f"{stem}.png"
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    _plt().close(fig)
    return path


def _median_over_weights(per_weight: dict[str, list[float]]) -> list[float]:
    return [statistics.median(vals) for vals in zip(*per_weight.values())]


def loss_figure(runs: dict, out: Path) -> Path:
    from attnum.studies.training.bias.headline import smoothed, window

    fig, ax = _plt().subplots(figsize=(7, 3.6))
    for name, r in runs.items():
        n, w = len(r["loss"]), window(len(r["loss"]))
        ax.plot(range(1, n + 1), r["loss"], lw=0.5, alpha=0.25, color=COLORS.get(name))
        ax.plot(range(w, n + 1), smoothed(r["loss"]), lw=1.2, color=COLORS.get(name), label=name)
    ax.set_yscale("log")
    ax.set(xlabel="training step", ylabel="training loss",
           title="Loss (same init, same data order; faint: per step, bold: mean of the last 25 steps)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _save(fig, out, "fig_loss")


def sigma_figure(runs: dict, out: Path) -> Path:
    keys = list(next(iter(runs.values()))["sigma"])
    cols = 4
    rows = -(-len(keys) // cols)
    fig, axes = _plt().subplots(rows, cols, figsize=(11, 2.4 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for name, r in runs.items():
            ax.plot(r["log_steps"], r["sigma"][key], lw=1, color=COLORS.get(name), label=name)
        ax.set_title(f"sigma_1({key})", fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Spectral norm of each attention weight over steps")
    return _save(fig, out, "fig_sigma")


def signed_figure(runs: dict, out: Path) -> Path:
    fig, axes = _plt().subplots(1, 4, figsize=(15, 3.4))
    panels = (("update_bias", "update-error bias (median over weights)"),
              ("grad_bias", "gradient-error bias (median over weights)"),
              ("coherence", "coherence of the summed update error"))
    for name, r in runs.items():
        axes[3].plot(r["log_steps"], r["ties_tile"], lw=1, color=COLORS.get(name), label=name)
    axes[3].set_title("tile rows with > 1 score within 1e-3 of the max", fontsize=9)
    axes[3].set_xlabel("training step")
    axes[3].grid(True, alpha=0.3)
    for ax, (key, title) in zip(axes, panels):
        for name, r in runs.items():
            if name == "fp32":
                continue
            ys = _median_over_weights(r[key])
            ax.plot(r["log_steps"][1:], ys[1:], lw=1, marker=".", ms=3, color=COLORS.get(name), label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("training step")
        ax.grid(True, alpha=0.3)
    r0 = next(iter(runs.values()))
    axes[2].plot(r0["log_steps"][1:], [s ** 0.5 for s in r0["log_steps"][1:]], "k:", lw=1, label="sqrt(t): one direction")
    axes[2].axhline(1.0, color="gray", lw=0.8, ls="--", label="1: random walk")
    axes[0].axhline(0.0, color="gray", lw=0.8)
    axes[1].axhline(0.0, color="gray", lw=0.8)
    axes[2].set_yscale("log")
    axes[2].legend(fontsize=7)
    axes[0].legend(fontsize=7)
    return _save(fig, out, "fig_signed")


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<figure><img class="figure" alt="{path.stem}" src="data:image/png;base64,{data}"></figure>'


def _sites_table(sites: dict) -> str:
    if not sites:
        return ""
    parts = []
    for res in sites:
        c = res["config"]
        head = (f"<h3>{html.escape(c['policy'])}, dist={html.escape(c['dist'])}, N=S={c['seq_len']}, "
                f"Bc={c['block_k']}, logit scale {c['logit_scale']}, causal={c['causal']}</h3>"
                f"<p>Rows whose tile holds more than one score within 1e-3 of its max: "
                f"{100 * res['ties']['tile']['near_fraction']:.1f}% (full rows: "
                f"{100 * res['ties']['row']['near_fraction']:.1f}%).</p>")
        rows = "".join(f"<tr><td style='text-align:left'>{html.escape(shift)}</td><td style='text-align:left'>"
                       f"{html.escape(name)}</td>" + "".join(f"<td>{r[q]['bias']:+.3f}</td>"
                                                             for q in ("o", "dq", "dk", "dv", "delta")) + "</tr>"
                       for shift, runs in res["runs"].items() for name, r in runs.items())
        parts.append(head + "<table><tr><th>max_shift</th><th>only this site rounds</th><th>O</th><th>dQ</th>"
                     f"<th>dK</th><th>dV</th><th>delta</th></tr>{rows}</table>")
    return ("<h2>Magnitude bias per rounding site (kernel level, against float64)</h2>"
            "<p>bias = mean(e sign(ref)) / mean|e|: +1 when every error enlarges |x|, -1 when every error "
            "shrinks it. <code>full</code>: the whole policy; <code>floor</code>: no site rounds (the "
            "carrier's own arithmetic).</p>" + "".join(parts))


def write_report(summary: dict, out: Path) -> Path:
    """Write the figures and ``index.html`` into ``out``; returns the HTML path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs, cfg, head = summary["runs"], summary["config"], summary["headline"]
    figs = [loss_figure(runs, out), sigma_figure(runs, out), signed_figure(runs, out)]
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in head["lines"])
    cols = ("final_loss", "blowup_step", "sigma_growth_max", "sigma_vs_ref_max", "update_bias", "update_signed",
            "update_rel", "grad_bias", "coherence", "lowrank", "ties_tile")
    table = "".join(
        f"<tr><td style='text-align:left'>{html.escape(n)}</td><td style='text-align:left'><code>"
        f"{html.escape(runs[n]['attention'])}</code></td>"
        + "".join(f"<td>{_fmt(s[c])}</td>" for c in cols) + f"<td>{runs[n]['wall_s']:.0f}</td></tr>"
        for n, s in head["runs"].items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>attnum diverge --profile {html.escape(cfg['profile'])}</title>
<style>{_CSS}</style></head><body>
<h1>Biased rounding in bf16 attention training ({html.escape(cfg['profile'])} profile)</h1>
<p>Byte-level LM (d_model {cfg['d_model']}, {cfg['n_heads']} heads, {cfg['n_layers']} layers), {cfg['steps']} steps,
lr {cfg['lr']}, context {cfg['seq_len']}, batch {cfg['batch_size']}, KV tile Bc = {cfg['block_k']}, data
<code>{html.escape(cfg['data'])}</code>; init seed {cfg['init_seed']} and data seed {cfg['data_seed']} in every run.
Every run's attention differs; the rest of the model is fp32. Update errors are taken at each run's own weights
against fp32 attention (definitions in <code>attnum.studies.training.bias.study</code>).</p>
<h2>Headline (computed from the runs below)</h2><ul>{lines}</ul>
<h2>Runs</h2><table><tr><th>run</th><th>attention</th>{''.join(f'<th>{c}</th>' for c in cols)}<th>wall s</th></tr>{table}</table>
{''.join(_img(p) for p in figs)}
{_sites_table(summary.get('sites', []))}
<p>Total wall time {summary['wall_s']:.0f} s.</p>
<script>{_CHECK}</script></body></html>"""
    path = out / "index.html"
    write_atomic(path, page)
    return path


def _fmt(x) -> str:
    if x is None:
        return "none"
    if isinstance(x, float):
        return f"{x:.4g}"
    return html.escape(str(x))
