"""The inference profile's figures and tables, drawn only from stored rows (``decode``/``fp8-table`` points).

Figures (each from its spec group; a group with no rows yields none): deviation from the float64 golden
against ``splits`` (flash-decoding), ``page_size`` (the kernel tiling by page), KV-cache format, GQA
group size, MLA absorbed vs explicit per latent-cache format, and FlashAttention-3's FP8 table beside
the paper's figures. Lines are medians over seeds with a min..max band (:mod:`attnum.report.plotting`).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from attnum.report.plotting import finish, log_y, panels, save, spread_line
from attnum.studies.serving.inference import fp8_rows
from attnum.sweep.registry import ReportContext, ReportPart
from attnum.sweep.results import Row, metric, seed_summary, select, series

DEV = "decode_vs_golden"
CAPTIONS = {
    "decode-splits": "Decode, split-KV: deviation from the fp64 golden against num_splits (partials merged in "
                     "fp32), bf16 and fp32 outputs; right: what splitting alone changed (vs the same decode "
                     "unsplit), in output ULPs (0, at one split, is off the log axis).",
    "decode-pages": "Paged decode tiled by page (Bc = page size): deviation against page size; right: vs the "
                    "contiguous unsplit decode with 128-key tiles, in output ULPs.",
    "decode-kv-format": "KV-cache format: RMSE against the golden on the unquantized cache (bars: median over seeds), "
                        "and the KV bytes each moves relative to bf16 (attnum.attention.cost.model).",
    "decode-gqa": "GQA: deviation against the group size H / G (G = H is MHA, G = 1 MQA), 4 splits.",
    "decode-mla": "MLA (DeepSeek) on a latent cache: explicit (K, V up-projected) and absorbed (W_UK in q, "
                  "MQA over the latent) RMSE vs golden per cache format, and absorbed vs explicit.",
    "fp8-table": "FlashAttention-3 Table 3 (arXiv 2407.08608): attnum's RMSE of each FP8/FP16 setting on outlier "
                 "inputs beside the paper's own figures.",
}


def _decode(rows: list[Row], group: str) -> list[Row]:
    return select(rows, group=group, kind="decode")


def _line_panels(rows, group, x, title, xlabel, out_dir, logx=True):
    sub = _decode(rows, group)
    if not sub:
        return []
    fig, axes = panels(2, title=title)
    ax, rax = axes[0]
    formats = sorted({r["config"]["format"] for r in sub})
    for fmt, style in zip(formats, ("-", "--", "-.", ":")):
        part = [r for r in sub if r["config"]["format"] == fmt]
        for key, color in (("max_abs", "tab:red"), ("rmse", "tab:blue")):
            spread_line(ax, series(part, x=x, y=f"{DEV}.{key}", by=()).get((), []), label=f"{fmt} decode {key}",
                        color=color, linestyle=style)
            spread_line(ax, series(part, x=x, y=f"baseline_vs_golden.{key}", by=()).get((), []),
                        label=f"{fmt} plain attention {key}", color=color, linestyle=style, marker=None, alpha=0.35)
        spread_line(rax, series(part, x=x, y="decode_vs_unsplit.max_ulp", by=()).get((), []), label=f"{fmt} max",
                    color="tab:red", linestyle=style)
        spread_line(rax, series(part, x=x, y="decode_vs_unsplit.mean_ulp", by=()).get((), []), label=f"{fmt} mean",
                    color="tab:blue", linestyle=style)
    for a in (ax, rax):
        if logx:
            a.set_xscale("log", base=2)
        log_y(a)
    finish(ax, xlabel=xlabel, ylabel="|decode - golden|")
    finish(rax, xlabel=xlabel, ylabel="|decode - unsplit| (output ULPs)")
    return save(fig, out_dir, group)


def splits_figure(rows, out_dir):
    return _line_panels(rows, "decode-splits", "splits", "Split-KV decode (flash-decoding)", "num_splits", out_dir)


def pages_figure(rows, out_dir):
    return _line_panels(rows, "decode-pages", "page_size", "Paged KV, tiled by page", "page size (tokens)", out_dir)


def gqa_figure(rows, out_dir):
    sub = _decode(rows, "decode-gqa")
    if not sub:
        return []
    fig, axes = panels(1, title="GQA / MQA decode")
    ax = axes[0][0]
    for key, color in (("max_abs", "tab:red"), ("rmse", "tab:blue")):
        pts = series(sub, x="kv_heads", y=f"{DEV}.{key}", by=()).get((), [])
        H = sub[0]["config"]["heads"]
        spread_line(ax, sorted((H // g, s) for g, s in pts), label=f"decode {key}", color=color)
    ax.set_xscale("log", base=2)
    log_y(ax)
    finish(ax, xlabel="group size H / G (1 = MHA)", ylabel="|decode - golden|")
    return save(fig, out_dir, "decode-gqa")


def _kv_label(cfg: dict) -> str:
    return "bf16 (auto)" if cfg["kv_cache_dtype"] == "auto" else f"{cfg['kv_cache_dtype']} scale {cfg['kv_scale']}"


def _bars(ax, labels, values, color, offset=0.0, width=0.8, label=None):
    xs = [i + offset for i in range(len(labels))]
    med = [v["median"] for v in values]
    err = [[v["median"] - v["min"] for v in values], [v["max"] - v["median"] for v in values]]
    ax.bar(xs, med, width, yerr=err, color=color, label=label, edgecolor="black", lw=0.4)
    ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=7, ha="right")


def _by_label(sub, path, label_of):
    out: dict[str, list[float]] = {}
    for r in sub:
        v = metric(r, path)
        if v is not None:
            out.setdefault(label_of(r["config"]), []).append(v)
    return {k: seed_summary(v) for k, v in out.items()}


def kv_figure(rows, out_dir):
    sub = _decode(rows, "decode-kv-format")
    if not sub:
        return []
    err = _by_label(sub, f"{DEV}.rmse", _kv_label)
    size = _by_label(sub, "cost.bytes", _kv_label)
    labels = list(err)
    fig, axes = panels(2, title="KV-cache formats (decode)")
    ax, cax = axes[0]
    _bars(ax, labels, [err[k] for k in labels], "tab:blue")
    ax.set_yscale("log")
    finish(ax, xlabel="KV cache", ylabel="RMSE vs golden")
    ref = size.get("bf16 (auto)", {}).get("median")
    if ref:
        rel = [{**size[k], **{q: size[k][q] / ref for q in ("median", "min", "max")}} for k in labels]
        _bars(cax, labels, rel, "tab:gray")
    finish(cax, xlabel="KV cache", ylabel="bytes moved / bf16's")
    return save(fig, out_dir, "decode-kv-format")


def mla_figure(rows, out_dir):
    sub = _decode(rows, "decode-mla")
    if not sub:
        return []
    fig, axes = panels(1, title="MLA: explicit vs absorbed", width=7)
    ax = axes[0][0]
    for i, (absorbed, color) in enumerate(((False, "tab:orange"), (True, "tab:green"))):
        part = [r for r in sub if r["config"]["absorbed"] == absorbed]
        err = _by_label(part, f"{DEV}.rmse", _kv_label)
        _bars(ax, list(err), list(err.values()), color, offset=(i - 0.5) * 0.27, width=0.27,
              label="absorbed" if absorbed else "explicit")
    ab = _by_label([r for r in sub if r["config"]["absorbed"]], "absorbed_vs_explicit.rmse", _kv_label)
    _bars(ax, list(ab), list(ab.values()), "tab:gray", offset=0.5 * 0.27 + 0.27, width=0.27,
          label="absorbed vs explicit")
    ax.set_yscale("log")
    finish(ax, xlabel="latent cache", ylabel="RMSE")
    return save(fig, out_dir, "decode-mla")


def fp8_figure(rows, out_dir):
    table = fp8_rows(rows)
    if not table:
        return []
    fig, axes = panels(1, title="FA3 Table 3: FP8 attention RMSE", width=8)
    ax = axes[0][0]
    labels = [r["key"] for r in table]
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], [r["rmse"] for r in table], 0.4, color="tab:blue", label="attnum")
    ax.bar([x + 0.2 for x in xs], [r["paper_rmse"] or 0 for r in table], 0.4, color="tab:gray", label="paper")
    ax.set_xticks(list(xs), labels, rotation=25, fontsize=7, ha="right")
    ax.set_yscale("log")
    finish(ax, xlabel="setting", ylabel="RMSE vs reference")
    return save(fig, out_dir, "fp8-table")


FIGURES = {
    "decode-splits": splits_figure,
    "decode-pages": pages_figure,
    "decode-kv-format": kv_figure,
    "decode-gqa": gqa_figure,
    "decode-mla": mla_figure,
    "fp8-table": fp8_figure,
}


def _cell(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return html.escape("" if x is None else str(x))


def _table(head: list[str], body: list[list[Any]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def section(rows: list[Row], findings=()) -> str:
    """The report's inference part: each inference finding (anchored as the findings table links it),
    the FP8 table beside the paper's and the KV formats with their cost; '' without inference rows."""
    parts = []
    for f in findings:
        if f.variant == "decode":
            parts.append(f"<section class='claim' id='claim-{html.escape(f.claim_id)}'><h3>{html.escape(f.claim)} "
                         f"&mdash; {html.escape(f.verdict)}</h3><p>{html.escape(f.measured)}</p></section>")
    table = fp8_rows(rows)
    if table:
        parts.append("<h3>FlashAttention-3 FP8 comparison (Table 3)</h3>")
        parts.append(_table(["setting", "attnum RMSE", "paper RMSE", "attnum / FA3 FP8", "paper / FA3 FP8"],
                            [[r["setting"], r["rmse"], r["paper_rmse"], r["ratio_to_fa3_fp8"],
                              r["paper_ratio_to_fa3_fp8"]] for r in table]))
    kv = _decode(rows, "decode-kv-format")
    if kv:
        err = _by_label(kv, f"{DEV}.rmse", _kv_label)
        size = _by_label(kv, "cost.bytes", _kv_label)
        over = _by_label(kv, "kv.overflow", _kv_label)
        t_h100 = _by_label(kv, "cost.bound_time_s.H100", _kv_label)
        parts.append("<h3>KV-cache formats</h3>")
        parts.append(_table(["KV cache", "RMSE vs golden (median)", "KV-cache overflow (max)", "bytes moved",
                             "H100 roofline bound (s)"],
                            [[k, err[k]["median"], over.get(k, {}).get("max"), size.get(k, {}).get("median"),
                              t_h100.get(k, {}).get("median")] for k in err]))
    if not parts:
        return ""
    return "<h2>Inference</h2>" + "".join(parts)


def draw(rows: list[Row], out_dir: Path) -> dict[str, list[Path]]:
    done = [r for r in rows if r.get("status") == "done"]
    return {name: paths for name, fn in FIGURES.items() if (paths := fn(done, out_dir))}


def report(ctx: ReportContext) -> ReportPart:
    """The serving family's part of ``report.html``: its figures and the inference section."""
    text = section(ctx.rows, ctx.findings)
    return ReportPart(figures=draw(ctx.rows, ctx.figures_dir), captions=CAPTIONS, sections=(text,) if text else ())
