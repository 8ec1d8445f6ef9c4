"""Curves and a self-contained HTML page for ``attnum diverge`` (the paper's Figs. 7-8 and losses).

Reads only the summary dict ``run_diverge`` produced (the numbers are never recomputed here).
Writes ``fig_max_abs``, ``fig_w1``, ``fig_loss`` as PNG and SVG, and ``index.html`` with the SVGs
inlined so the page can be mailed or archived as one file. Curves are the median over seeds with
a min..max band; the headline sentence, the per-seed ratios and their spread come first.
"""

from __future__ import annotations

import html
import math
import statistics
from pathlib import Path

from attnum.store.outfile import save_figure, write_atomic
from attnum.studies.training.headline import COMPARISONS, METRICS, PROXIES

_COLORS = {"flash": "tab:red", "seed": "tab:blue", "lowprec": "tab:green", "baseline": "black"}
_STYLES = {"flash": "-", "seed": "--", "lowprec": "-."}
_MARKERS = {"flash": "o", "seed": "s", "lowprec": "^"}


def _figure(curves: dict, key: str, ylabel: str, title: str, out: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    seeds = list(curves)
    for name, label in COMPARISONS.items():
        steps = curves[seeds[0]][name]["step"]
        cols = [[curves[s][name][key][i] for s in seeds] for i in range(len(steps))]
        # log axis: step 0 of same-init runs is 0, which a log axis cannot show
        pts = [(st, statistics.median(c), min(c), max(c)) for st, c in zip(steps, cols) if min(c) > 0]
        if pts:
            xs, med, lo, hi = zip(*pts)
            ax.plot(xs, med, marker=_MARKERS[name], ms=3, color=_COLORS[name], linestyle=_STYLES[name],
                    label=f"{label} (median of {len(seeds)} seeds)")
            ax.fill_between(xs, lo, hi, color=_COLORS[name], alpha=0.15, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, handlelength=3.5)
    fig.tight_layout()
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for p in paths:
        save_figure(fig, p, dpi=120)
    plt.close(fig)
    return paths


def _loss_figure(runs: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for name, r in runs.items():
        kind = name.split("-")[0]
        ax.plot(range(1, len(r["losses"]) + 1), r["losses"], lw=1, color=_COLORS.get(kind),
                linestyle=_STYLES.get(kind, "-"), label=name, alpha=0.7)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss")
    ax.set_title("Loss of every run (same data order)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=3, handlelength=3)
    fig.tight_layout()
    paths = [out / "fig_loss.png", out / "fig_loss.svg"]
    for p in paths:
        save_figure(fig, p, dpi=120)
    plt.close(fig)
    return paths


def _svg_inline(path: Path) -> str:
    text = path.read_text()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE


def _g(x: float) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


def _ratio_table(head: dict) -> str:
    keys = [("w1", "W1 at the last step"), ("max_abs", "max|dW| at the last step"), ("w1_rate", "W1 growth rate"),
            ("max_abs_rate", "max|dW| growth rate")]
    seeds = list(head["per_seed"])
    rows = ""
    for proxy, label in PROXIES.items():
        for key, what in keys:
            s = head["ratios"][proxy][key]
            per = "".join(f"<td>{_g(head['per_seed'][sd]['ratios'][proxy][key])}</td>" for sd in seeds)
            rows += (f"<tr><td style='text-align:left'>flash / {html.escape(label)}</td><td style='text-align:left'>"
                     f"{what}</td><td><b>{_g(s['median'])}</b></td><td>{_g(s['min'])} .. {_g(s['max'])}</td>{per}</tr>")
    th = "".join(f"<th>seed {html.escape(str(sd))}</th>" for sd in seeds)
    return (f"<table><tr><th>ratio</th><th>measure</th><th>median</th><th>spread (min .. max)</th>{th}</tr>"
            f"{rows}</table>")


def _slope_table(head: dict) -> str:
    seeds = list(head["per_seed"])
    rows = ""
    for name, label in COMPARISONS.items():
        for key, what in METRICS.items():
            vals = [head["per_seed"][sd]["slopes"][name][key] for sd in seeds]
            rows += (f"<tr><td style='text-align:left'>{html.escape(label)}</td><td>{what} per step</td>"
                     + "".join(f"<td>{v:.3e}</td>" for v in vals) + "</tr>")
    th = "".join(f"<th>seed {html.escape(str(sd))}</th>" for sd in seeds)
    return f"<table><tr><th>comparison</th><th>slope</th>{th}</tr>{rows}</table>"


def write_report(summary: dict, out: Path) -> Path:
    """Write figures and ``index.html`` into ``out``; returns the HTML path."""
    out.mkdir(parents=True, exist_ok=True)
    curves = summary["curves"]
    head = summary["headline"]
    figs = [
        _figure(curves, "max_abs", "max |W_a - W_b|", "Max weight difference vs baseline (cf. paper Fig. 7)",
                out, "fig_max_abs"),
        _figure(curves, "w1", "Wasserstein-1 of all weights", "Weight-distribution W1 vs baseline (cf. Fig. 8)",
                out, "fig_w1"),
        _loss_figure(summary["runs"], out),
    ]
    cfg = summary["config"]
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(r['attention'])}</td><td>{r['precision']}</td>"
        f"<td>{r['init_seed']}</td><td>{r['losses'][-1]:.4g}</td><td>{r['wall_s']:.1f}</td>"
        f"<td>{'reused' if r.get('reused') else 'trained'}</td></tr>"
        for k, r in summary["runs"].items()
    )
    first = next(iter(curves))
    per = curves[first]["flash"]["per_tensor"]
    top = sorted(per, key=lambda n: -per[n]["w1"][-1])[:12]
    tensor_rows = "".join(
        f"<tr><td style='text-align:left'>{html.escape(n)}</td>"
        + "".join(f"<td>{curves[first][k]['per_tensor'][n]['w1'][-1]:.3e}</td>" for k in COMPARISONS)
        + f"<td>{per[n]['max_abs'][-1]:.3e}</td></tr>"
        for n in top
    )
    body = "".join(f"<figure>{_svg_inline(p[1])}</figure>" for p in figs)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>attnum diverge: {html.escape(cfg['workload'])}</title>
<style>body{{font-family:sans-serif;max-width:64em;margin:2em auto}}table{{border-collapse:collapse;margin:.5em 0 1em}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}figure{{margin:1em 0}}svg{{max-width:100%;height:auto}}
p.headline{{font-size:1.1em;background:#f4f6fa;padding:.6em;border-left:4px solid #1f4e99}}</style>
</head><body>
<h1>Weight divergence: {html.escape(cfg['workload'])} ({html.escape(cfg['profile'])} profile)</h1>
<p class="headline">{html.escape(head['sentence'])}</p>
<p>Flash run <code>{html.escape(cfg['attention'])}</code> against the baseline <code>{html.escape(cfg['baseline'])}</code>
(the same precision: the difference is the algorithm), for init seeds {html.escape(', '.join(map(str, cfg['seeds'])))}.
Proxies: the baseline of the next seed (different init), and the baseline under
{html.escape(cfg['low_precision'])} autocast (low precision). Same data order (data seed {cfg['data_seed']}) in every run.
W1 is the 1-D Wasserstein distance between the distributions of all weights (concatenated); max |dW| is over
every tensor; growth rates are least-squares slopes over the checkpoints.</p>
<h2>Ratios at step {head['step']}, per seed and their spread</h2>{_ratio_table(head)}
<h2>Growth over steps (slopes)</h2>{_slope_table(head)}
{body}
<h2>Per tensor at step {head['step']}, seed {html.escape(first)} (largest flash W1 first)</h2>
<table><tr><th>tensor</th>{''.join(f"<th>W1 {html.escape(v)}</th>" for v in COMPARISONS.values())}<th>flash max |dW|</th></tr>{tensor_rows}</table>
<h2>Runs</h2>
<table><tr><th>run</th><th>attention</th><th>precision</th><th>init seed</th><th>final loss</th><th>wall s</th><th></th></tr>{rows}</table>
<p>Total wall time {summary['wall_s']:.1f} s.</p>
</body></html>"""
    path = out / "index.html"
    write_atomic(path, page)
    return path


def write_checkpoint_report(result: dict, out: Path) -> Path:
    """Curves over steps (when the folders hold several step files) and an HTML table for
    ``attnum diverge --checkpoints``; reads only ``folder_compare.compare_folders``' result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    pairs = result["pairs"]
    stepped = [p for p in pairs if p["step"] is not None]
    figure = ""
    if len(stepped) >= 2:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, key, label in ((axes[0], "max_abs", "max |W_A - W_B|"), (axes[1], "w1", "W1 of all weights")):
            ax.plot([p["step"] for p in stepped], [p[key] for p in stepped], marker="o", ms=3)
            ax.set_xlabel("step")
            ax.set_ylabel(label)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        for suffix in ("png", "svg"):
            save_figure(fig, out / f"fig_checkpoints.{suffix}", dpi=120)
        plt.close(fig)
        figure = f"<figure>{_svg_inline(out / 'fig_checkpoints.svg')}</figure>"
    rows = "".join(
        f"<tr><td style='text-align:left'>{html.escape(p['name'])}</td><td>{p['max_abs']:.3e}</td>"
        f"<td>{p['w1']:.3e}</td><td>{p['w1_mean']:.3e}</td><td>{len(p['per_tensor'])}</td>"
        f"<td style='text-align:left'>{html.escape('; '.join(m['name'] + ': ' + m['reason'] for m in p['mismatches']))}</td></tr>"
        for p in pairs
    )
    unpaired = "".join(f"<li>{html.escape(u)}</li>" for u in result["unpaired_files"])
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>attnum diverge --checkpoints</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}svg{{max-width:100%;height:auto}}</style></head><body>
<h1>Checkpoint divergence</h1><p>A = <code>{html.escape(result['a'])}</code>, B = <code>{html.escape(result['b'])}</code></p>
<table><tr><th>pair</th><th>max |dW|</th><th>W1 (all weights)</th><th>mean per-tensor W1</th><th>tensors compared</th>
<th>mismatches (left out)</th></tr>{rows}</table>
{f"<h2>Unpaired files</h2><ul>{unpaired}</ul>" if unpaired else ""}{figure}</body></html>"""
    path = out / "checkpoints.html"
    write_atomic(path, page)
    return path
