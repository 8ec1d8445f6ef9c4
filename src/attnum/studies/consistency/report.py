"""The consistency study's tables: plain text for the terminal, HTML for the report. Reads results only."""

from __future__ import annotations

import html
from typing import Any


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def invariance_rows(result: dict[str, Any]) -> list[list[str]]:
    """Rule x batch size: bit-identical fraction vs the request alone and max ulp, the knob named."""
    rows = []
    for r in result["rules"]:
        cells = [f"{_pct(b['identical'])} / {b['max_ulp']:.0f}" for b in r["batches"]]
        rows.append([r["rule"], *cells, ", ".join(r["breaks"]) or "none", f"{r['alone_vs_golden_ulp']:.1f}",
                     f"{_pct(r['decode_vs_prefill']['identical'])} / {r['decode_vs_prefill']['max_ulp']:.0f}",
                     ", ".join(k for k, s in r["prefill_knobs"].items() if s["identical"] < 1.0) or "none"])
    return rows


def invariance_header(result: dict[str, Any]) -> list[str]:
    return ["rule", *(f"B={b['B']}" for b in result["rules"][0]["batches"]), "knob that breaks it",
            "alone vs golden (ulp)", "decode vs prefill", "knob (prefill vs decode)"]


def mode_rows(result: dict[str, Any]) -> list[list[str]]:
    return [[m["mode"], f"{_pct(m['vs_prefill']['identical'])}", f"{m['vs_prefill']['max_ulp']:.0f}",
             f"{m['vs_golden_ulp']:.1f}"] for m in result["modes"]]


MODE_HEADER = ["way", "identical to prefill", "max ulp vs prefill", "max ulp vs golden"]
TOKEN_HEADER = ["format", "schedule", "rule", "prompts with >1 completion", "max unique", "KL mean", "KL max",
                "max |Δ log p|"]
COST_DEVICES = ("A100", "H100", "H200")


def token_rows(tokens: dict[str, Any]) -> list[list[str]]:
    n = tokens["config"]["prompts"]
    return [[r["format"], r["schedule"], r["rule"], f"{r['prompts_with_flips']}/{n}", str(r["max_unique"]),
             f"{r['kl_mean']:.2e}", f"{r['kl_max']:.2e}", f"{r['max_abs_dlogp']:.2e}"] for r in tokens["results"]]


def cost_rows(cost: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in cost:
        cells = [f"{r['splits'][d]} / {r['time_s'][d] * 1e6:.1f} us ({r['ratio_vs_fa2'][d]:.2f}x)"
                 for d in COST_DEVICES]
        out.append([f"B={r['B']} L={r['L']}", r["rule"], *cells])
    return out


COST_HEADER = ["scenario", "rule", *(f"{d}: splits / bound (vs fa2)" for d in COST_DEVICES)]


def invariance_legend(result: dict[str, Any]) -> str:
    """What a cell of the invariance table says, for the text table and the report alike."""
    return ("Each B=n and 'decode vs prefill' cell reads 'identical / max ulp': the share of decode outputs "
            "bit-identical to the request served alone (or, for 'decode vs prefill', to its prefill), and the "
            f"largest distance in ulps of {result['format']} at the row's scale (0 = every bit the same).")


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Aligned text; no line ends in padding spaces (a file or a pipe keeps only what is there)."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()
    body = ("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return "\n".join([line, "-" * len(line), *body])


def html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_section(result: dict[str, Any] | None, tokens: dict[str, Any] | None = None,
                 cost: list[dict[str, Any]] | None = None, *, anchor: str = "consistency") -> str:
    """The report's "Same request, same answer?" section from stored results (``anchor``: its HTML id)."""
    title = "Same request, same answer? (batch invariance)"
    if result:
        c = result["config"]
        title += (f" &mdash; {html.escape(str(c['policy']))}, T={c['length']}, H={c['heads']}, G={c['kv_heads']}, "
                  f"d={c['head_dim']}, seed {c['seed']}")
    parts = [f'<section id="{html.escape(anchor)}"><h2>{title}</h2>']
    if result:
        parts += [f"<p>{html.escape(invariance_legend(result))}</p>",
                  html_table(invariance_header(result), invariance_rows(result)),
                  html_table(MODE_HEADER, mode_rows(result))]
    if tokens:
        parts += ["<h3>Tokens</h3>", html_table(TOKEN_HEADER, token_rows(tokens))]
    if cost:
        parts += ["<h3>Cost of invariance (roofline bound, occupancy model)</h3>",
                  html_table(COST_HEADER, cost_rows(cost))]
    return "\n".join(parts + ["</section>"])
