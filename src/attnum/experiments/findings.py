"""The paper's claims, checked against stored results, per policy and variant.

Only the claims (what the paper says) and the decision rules are written here; every sentence of a
finding is a template filled with the measured numbers, and the verdict comes from the data.
Rules (named so a reader can argue with them):
- a trend "holds" when the Spearman rank correlation over the sweep has the claimed sign with
  |rho| >= TREND_RHO (monotone up to noise, without assuming a functional form);
- "about 10x" holds when the ratio is within half a decade of 10;
- "worse" / "no effect" compare paired points (same seed and config but the flag) by the geometric
  mean of their ratio against EFFECT (10%), using only pairs whose tiles the flag actually changed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from attnum.experiments.results import Row, geomean, metric, seed_summary, select, series, spearman, values

TREND_RHO = 0.8
TEN_X_BAND = (10 / math.sqrt(10), 10 * math.sqrt(10))
EFFECT = 1.1
HEADLINE_FORMAT = "bf16"  # the paper's low-precision focus
FLASH_VS_BASELINE = "flash_vs_baseline.max_abs"

CLAIMS = {
    "mantissa": ("Fig. 3", "flash-vs-baseline deviation decreases as mantissa bits grow"),
    "ten_x": ("Fig. 4", "at bf16, flash deviates about 10x more from the fp64 golden than baseline"),
    "seq_len": ("Fig. 5", "deviation grows with sequence length at fixed tiles and SRAM"),
    "swap": ("Fig. 6a", "swapping the block dimensions increases deviation"),
    "square": ("Fig. 6b", "forcing square tiles has no effect on deviation"),
    "tiles": ("Fig. 6c", "larger tiles give less deviation"),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Finding:
    """One claim under one policy and variant: the verdict and the numbers behind it."""

    claim_id: str
    figure: str
    claim: str
    policy: str
    variant: str
    verdict: str  # "holds" | "does not hold" | "not tested"
    measured: str
    numbers: dict[str, Any]

    def __post_init__(self) -> None:
        if self.verdict not in ("holds", "does not hold", "not tested"):
            raise ValueError(f"verdict={self.verdict!r} must be 'holds', 'does not hold' or 'not tested'")


def compute_findings(rows: list[Row]) -> list[Finding]:
    """Every claim for every (policy, variant) present in the compare rows."""
    compare = [r for r in rows if r.get("kind") == "compare" and r.get("status") == "done"]
    out = []
    for claim_id, check in _CHECKS.items():
        figure, claim = CLAIMS[claim_id]
        for policy in sorted(values(compare, "policy")):
            for variant in sorted(values(compare, "variant")):
                subset = select(compare, policy=policy, variant=variant)
                verdict, measured, numbers = check(subset)
                out.append(Finding(claim_id=claim_id, figure=figure, claim=claim, policy=policy,
                                   variant=variant, verdict=verdict, measured=measured, numbers=numbers))
    return out


def _trend(ok: bool | None) -> str:
    return "not tested" if ok is None else ("holds" if ok else "does not hold")


def _mantissa(rows: list[Row]) -> tuple[str, str, dict]:
    fig3 = select(rows, group="fig3")
    pts = _by_mbits(fig3)
    if len(pts) < 3:
        return "not tested", "fewer than 3 formats in group fig3", {}
    rho = spearman([m for m, _, _ in pts], [y for _, _, y in pts])
    extra = {}
    for group in ("fig3-e8", "fig3-e11"):
        sweep = _by_mbits(select(rows, group=group))
        if len(sweep) >= 3:
            extra[group] = spearman([m for m, _, _ in sweep], [y for _, _, y in sweep])
    (m_lo, f_lo, y_lo), (m_hi, f_hi, y_hi) = pts[0], pts[-1]
    text = (f"flash vs baseline max |diff| {y_lo:.2e} at {f_lo} ({m_lo} mantissa bits) -> {y_hi:.2e} at "
            f"{f_hi} ({m_hi} bits); Spearman rho = {rho:.2f} over {len(pts)} formats")
    text += "".join(f"; {g}: rho = {r:.2f}" for g, r in extra.items())
    return _trend(rho <= -TREND_RHO), text, {"rho": rho, **{f"rho_{g}": r for g, r in extra.items()}}


def _by_mbits(rows: list[Row]) -> list[tuple[int, str, float]]:
    """(mantissa bits, format, seed-median flash-vs-baseline max) per format, by mantissa bits."""
    out = []
    for fmt, summary in series(rows, x="format", y=FLASH_VS_BASELINE, by=()).get((), []):
        mbits = next((metric(r, "format_bits.mbits") for r in rows if r["config"]["format"] == fmt), None)
        if mbits is not None:
            out.append((int(mbits), fmt, summary["median"]))
    return sorted(out)


def _ten_x(rows: list[Row]) -> tuple[str, str, dict]:
    fig4 = select(rows, group="fig4", format=HEADLINE_FORMAT)
    if not fig4:
        return "not tested", f"no {HEADLINE_FORMAT} points in group fig4", {}
    n = max(r["config"]["seq_len"] for r in fig4)
    at_n = select(fig4, seq_len=n)
    flash = seed_summary([v for r in at_n if (v := metric(r, "flash_vs_golden.max_abs")) is not None])
    base = seed_summary([v for r in at_n if (v := metric(r, "baseline_vs_golden.max_abs")) is not None])
    ratio = flash["median"] / base["median"] if base["median"] > 0 else float("inf")
    text = (f"flash/baseline vs golden at {HEADLINE_FORMAT}, N={n}: {ratio:.2g}x "
            f"(flash {flash['median']:.2e}, baseline {base['median']:.2e}, median of {flash['n']} seeds)")
    return _trend(TEN_X_BAND[0] <= ratio <= TEN_X_BAND[1]), text, {"ratio": ratio, "seq_len": n}


def _seq_len(rows: list[Row]) -> tuple[str, str, dict]:
    fig5 = select(rows, group="fig5", format=HEADLINE_FORMAT)
    pts = series(fig5, x="seq_len", y=FLASH_VS_BASELINE, by=()).get((), [])
    means = dict(series(fig5, x="seq_len", y="flash_vs_baseline.mean_abs", by=()).get((), []))
    if len(pts) < 3:
        return "not tested", f"fewer than 3 sequence lengths at {HEADLINE_FORMAT} in group fig5", {}
    ns = [n for n, _ in pts]
    rho_max = spearman(ns, [s["median"] for _, s in pts])
    rho_mean = spearman(list(means), [s["median"] for s in means.values()])
    # Flash against the golden, for the reader: the verdict uses flash vs baseline, as Figs. 3 and 6.
    golden = series(fig5, x="seq_len", y="flash_vs_golden.max_abs", by=()).get((), [])
    rho_golden = spearman([n for n, _ in golden], [s["median"] for _, s in golden])
    (n0, s0), (n1, s1) = pts[0], pts[-1]
    text = (f"flash vs baseline at {HEADLINE_FORMAT}: max |diff| {s0['median']:.2e} at N={n0} -> "
            f"{s1['median']:.2e} at N={n1} ({s1['median'] / s0['median']:.2g}x); Spearman rho = {rho_max:.2f} "
            f"(max), {rho_mean:.2f} (mean) over {len(pts)} lengths; flash vs golden max: rho = {rho_golden:.2f}")
    holds = rho_max >= TREND_RHO and rho_mean >= TREND_RHO
    numbers = {"rho_max": rho_max, "rho_mean": rho_mean, "rho_flash_vs_golden": rho_golden,
               "growth": s1["median"] / s0["median"]}
    return _trend(holds), text, numbers


def _flag_effect(rows: list[Row], group: str, flag: str) -> tuple[float, int, int]:
    """(geomean ratio flag/no-flag, pairs whose tiles changed, all pairs) over non-fp64 formats."""
    subset = [r for r in select(rows, group=group) if r["config"]["format"] != "fp64"]
    pairs: dict[tuple, dict[bool, Row]] = {}
    for r in subset:
        rest = tuple(sorted((k, repr(v)) for k, v in r["config"].items() if k != flag))
        pairs.setdefault(rest, {})[bool(r["config"][flag])] = r
    ratios, total = [], 0
    for pair in pairs.values():
        if True not in pair or False not in pair:
            continue
        total += 1
        on, off = pair[True], pair[False]
        if (on["metrics"] or {}).get("tiles") == (off["metrics"] or {}).get("tiles"):
            continue  # the flag did not change the tiles here: no information about its effect
        a, b = metric(on, FLASH_VS_BASELINE), metric(off, FLASH_VS_BASELINE)
        if a is not None and b:
            ratios.append(a / b)
    return geomean(ratios), len(ratios), total


def _swap(rows: list[Row]) -> tuple[str, str, dict]:
    g, n, total = _flag_effect(rows, "fig6a", "swap_blocks")
    if not n:
        return "not tested", f"no point in fig6a where swapping changed the tiles ({total} pairs)", {}
    text = f"swapped/normal flash-vs-baseline max |diff|: geometric mean {g:.2f}x over {n} pairs (non-fp64)"
    return _trend(g > EFFECT), text, {"geomean_ratio": g, "pairs": n}


def _square(rows: list[Row]) -> tuple[str, str, dict]:
    g, n, total = _flag_effect(rows, "fig6b", "square")
    if not n:
        return "not tested", f"no point in fig6b where square tiles differed from the default ({total} pairs)", {}
    text = f"square/default flash-vs-baseline max |diff|: geometric mean {g:.2f}x over {n} pairs (non-fp64)"
    return _trend(1 / EFFECT <= g <= EFFECT), text, {"geomean_ratio": g, "pairs": n}


def _tiles(rows: list[Row]) -> tuple[str, str, dict]:
    fig6c = select(rows, group="fig6c", format=HEADLINE_FORMAT, swap_blocks=False, square=False)
    pts = series(fig6c, x="block_area", y=FLASH_VS_BASELINE, by=()).get((), [])
    if len(pts) < 3:
        return "not tested", f"fewer than 3 block areas at {HEADLINE_FORMAT} in group fig6c", {}
    rho = spearman([a for a, _ in pts], [s["median"] for _, s in pts])
    (a0, s0), (a1, s1) = pts[0], pts[-1]
    text = (f"flash vs baseline at {HEADLINE_FORMAT}: max |diff| {s0['median']:.2e} at block area {a0} -> "
            f"{s1['median']:.2e} at {a1}; Spearman rho = {rho:.2f} over {len(pts)} areas")
    return _trend(rho <= -TREND_RHO), text, {"rho": rho}


_CHECKS: dict[str, Callable[[list[Row]], tuple[str, str, dict]]] = {
    "mantissa": _mantissa,
    "ten_x": _ten_x,
    "seq_len": _seq_len,
    "swap": _swap,
    "square": _square,
    "tiles": _tiles,
}
