"""Curves and a self-contained HTML page for ``attnum diverge`` (the paper's Figs. 7-8 and losses).

Reads only the summary dict ``run_diverge`` produced (the numbers are never recomputed here).
Writes ``fig_max_abs``, ``fig_w1``, ``fig_loss`` as PNG and SVG, and ``index.html`` with the SVGs
inlined so the page can be mailed or archived as one file.
"""

from __future__ import annotations

import html
from pathlib import Path

from attnum.training.diverge import COMPARISONS

_COLORS = {"flash": "tab:red", "seed": "tab:blue", "lowprec": "tab:green", "baseline": "black"}


def _figure(curves: dict, key: str, ylabel: str, title: str, out: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, label in COMPARISONS.items():
        c = curves[name]
        pts = [(s, y) for s, y in zip(c["step"], c[key]) if y > 0]  # log axis: step 0 of same-init runs is 0
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, color=_COLORS[name], label=label)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for p in paths:
        fig.savefig(p, dpi=120)
    plt.close(fig)
    return paths


def _loss_figure(runs: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, r in runs.items():
        ax.plot(range(1, len(r["losses"]) + 1), r["losses"], lw=1, color=_COLORS.get(name), label=name, alpha=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss")
    ax.set_title("Loss of every run (same data order)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths = [out / "fig_loss.png", out / "fig_loss.svg"]
    for p in paths:
        fig.savefig(p, dpi=120)
    plt.close(fig)
    return paths


def _svg_inline(path: Path) -> str:
    text = path.read_text()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE


def write_report(summary: dict, out: Path) -> Path:
    """Write figures and ``index.html`` into ``out``; returns the HTML path."""
    out.mkdir(parents=True, exist_ok=True)
    curves = summary["curves"]
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
        f"<td>{r['init_seed']}</td><td>{r['losses'][-1]:.4g}</td><td>{r['wall_s']:.1f}</td></tr>"
        for k, r in summary["runs"].items()
    )
    last = {k: {m: c[m][-1] for m in ("max_abs", "w1", "w1_mean")} for k, c in curves.items()}
    div_rows = "".join(
        f"<tr><td>{html.escape(COMPARISONS[k])}</td><td>{v['max_abs']:.3e}</td><td>{v['w1']:.3e}</td>"
        f"<td>{v['w1_mean']:.3e}</td></tr>"
        for k, v in last.items()
    )
    per = curves["flash"]["per_tensor"]
    top = sorted(per, key=lambda n: -per[n]["w1"][-1])[:12]
    tensor_rows = "".join(
        f"<tr><td style='text-align:left'>{html.escape(n)}</td>"
        + "".join(f"<td>{curves[k]['per_tensor'][n]['w1'][-1]:.3e}</td>" for k in COMPARISONS)
        + f"<td>{per[n]['max_abs'][-1]:.3e}</td></tr>"
        for n in top
    )
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in summary["headline"]["lines"])
    body = "".join(f"<figure>{_svg_inline(p[1])}</figure>" for p in figs)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>attnum diverge: {html.escape(cfg['workload'])}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}figure{{margin:1em 0}}svg{{max-width:100%;height:auto}}</style>
</head><body>
<h1>Weight divergence: {html.escape(cfg['workload'])} ({html.escape(cfg['profile'])} profile)</h1>
<p>Candidate attention <code>{html.escape(cfg['attention'])}</code> vs baseline <code>{html.escape(cfg['baseline'])}</code>;
proxies: init seed {cfg['alt_seed']} vs {cfg['init_seed']}, and {html.escape(cfg['low_precision'])} autocast vs fp32.
Same data order (data seed {cfg['data_seed']}) in every run. W1 is the 1-D Wasserstein distance between the
distributions of all weights (concatenated); max |dW| is over every tensor.</p>
<h2>Headline (computed from the runs below)</h2><ul>{lines}</ul>
<h2>Divergence at step {summary['headline']['step']}</h2>
<table><tr><th>comparison</th><th>max |dW|</th><th>W1 (all weights)</th><th>mean per-tensor W1</th></tr>{div_rows}</table>
<h2>Per tensor at step {summary['headline']['step']} (largest flash W1 first)</h2>
<table><tr><th>tensor</th>{''.join(f"<th>W1 {html.escape(v)}</th>" for v in COMPARISONS.values())}<th>flash max |dW|</th></tr>{tensor_rows}</table>
<h2>Runs</h2>
<table><tr><th>run</th><th>attention</th><th>precision</th><th>init seed</th><th>final loss</th><th>wall s</th></tr>{rows}</table>
{body}
<p>Total wall time {summary['wall_s']:.1f} s.</p>
</body></html>"""
    path = out / "index.html"
    path.write_text(page)
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
            fig.savefig(out / f"fig_checkpoints.{suffix}", dpi=120)
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
    path.write_text(page)
    return path
