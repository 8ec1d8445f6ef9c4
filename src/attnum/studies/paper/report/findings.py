"""The paper's claims, checked against stored results as maps over the grid, not at one point.

Only the claims (what the paper says) and the decision rules are written here; every sentence is a
template filled with the measured numbers, and every verdict comes from the data. Each claim is
judged in every *cell* of the data (:mod:`attnum.studies.paper.report.cells`: all config fields but the swept
axis and the seed, so N, Bc, policy, variant, input distribution and anything else a sweep varies
stay apart), and the map says where the claim holds and where it flips.

Rules (named so a reader can argue with them):
- a trend "holds" when the Spearman rank correlation over the swept axis, of the median over seeds,
  has the claimed sign with |rho| >= TREND_RHO (monotone up to noise, no functional form assumed);
- Fig. 4, "about 10x": the median over seeds of the per-seed ratio flash/baseline (max |error| vs the
  fp64 golden) lies within half a decade of 10;
- Fig. 5 is judged on errors relative to the output's mean |O| (|O| shrinks as N grows, so absolute
  errors fall even where the relative error grows);
- Figs. 6a-c leave fp64 out: its errors are rounding noise near 1e-16, with no trend to judge;
- "worse" / "no effect" compare paired points (same seed and config but the flag) by the geometric
  mean of their ratio against EFFECT (10%), using only pairs whose tiles the flag changed;
- Fig. 6a also pairs each swapped point with the unswapped point that has the same Bc, which
  separates the swap itself from the change of Bc it causes;
- Fig. 6b "holds by construction in the forward pass" (square tiles set Br = Bc and leave Bc alone,
  and only Bc enters a row's arithmetic); the data are still checked and would say "does not hold".
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from typing import Any

from attnum.studies.paper.report import cells as C
from attnum.studies.paper.report.cells import Cell
from attnum.studies.paper.report.flag_claims import square_cells, swap_cells
from attnum.sweep.registry import Finding
from attnum.sweep.results import Row, metric, seed_summary, spearman

TREND_RHO = 0.8
TEN_X_BAND = (10 / math.sqrt(10), 10 * math.sqrt(10))
HEADLINE_FORMAT = "bf16"  # the paper's low-precision focus
REL_MAX, REL_MEAN = "flash_vs_baseline.rel_max_abs", "flash_vs_baseline.rel_mean_abs"
GRID = ("grid", "grid-dist")  # the profile's groups over N, Bc, policy, variant and distribution

CLAIMS = {
    "mantissa": ("Fig. 3", "flash-vs-baseline deviation decreases as mantissa bits grow"),
    "ten_x": ("Fig. 4", "at bf16, flash deviates about 10x more from the fp64 golden than baseline"),
    "seq_len": ("Fig. 5", "deviation grows with sequence length at fixed tiles and SRAM"),
    "swap": ("Fig. 6a", "swapping the block dimensions increases deviation"),
    "square": ("Fig. 6b", "forcing square tiles has no effect on deviation"),
    "tiles": ("Fig. 6c", "larger tiles give less deviation"),
}
BY_CONSTRUCTION = {
    "square": "holds by construction in the forward pass: square tiles set Br = Bc and leave Bc unchanged, and "
              "in the forward pass only Bc enters a row's arithmetic (query blocks are independent)",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClaimMap:
    """One claim over every cell of the data: the cells, and where it holds."""

    claim_id: str
    figure: str
    claim: str
    value_label: str
    cells: tuple[Cell, ...]
    note: str = ""

    @property
    def fields(self) -> list[str]:
        return list(self.cells[0].coords) if self.cells else []

    @property
    def verdict(self) -> str:
        return _overall([c.verdict for c in self.cells])

    def summary(self, cells: tuple[Cell, ...] | None = None) -> str:
        cells = self.cells if cells is None else cells
        tested = [c for c in cells if c.verdict != "not tested"]
        if not tested:
            return "not tested: " + (cells[0].text if cells else "no rows for this claim")
        if len(tested) == 1:
            return tested[0].text
        held = [c for c in tested if c.verdict in ("holds", "holds by construction")]
        text = f"holds in {len(held)} of {len(tested)} cells"
        if held and len(held) < len(tested):
            where = C.region([c.coords for c in held], [c.coords for c in tested])
            if where != C.EVERYWHERE:
                text += f"; every cell where it holds has {where}"
        values = [c.value for c in tested if math.isfinite(c.value)]
        if values:
            text += f"; {self.value_label} {min(values):.3g} .. {max(values):.3g}"
        if all("Tc" in c.numbers for c in tested):
            text += "; " + tile_regime(tested)
        return text


def tile_regime(cells: list[Cell] | tuple[Cell, ...]) -> str:
    """Where flash's excess appears, by the number of KV tiles a row is summed over (Tc = S / Bc):
    the smallest Tc from which every cell is at least the 10x band's lower edge, and the largest up
    to which none is; computed from the cells, so it says "no such Tc" when the data have none."""
    lo = TEN_X_BAND[0]
    tcs = sorted({c.numbers["Tc"] for c in cells})
    above = [t for t in tcs if all(c.value >= lo for c in cells if c.numbers["Tc"] >= t)]
    below = [t for t in tcs if all(c.value < lo for c in cells if c.numbers["Tc"] <= t)]
    text = (f"the ratio is >= {lo:.2g}x in every cell with Tc = S/Bc >= {above[0]}" if above else
            f"no Tc above which every cell reaches {lo:.2g}x")
    text += f", and below it in every cell with Tc <= {below[-1]}" if below else ""
    over = [c for c in cells if c.value > TEN_X_BAND[1]]
    if over:
        text += f"; above {TEN_X_BAND[1]:.2g}x in {len(over)} cells (up to {max(c.value for c in over):.3g}x)"
    return text


def compute_maps(rows: list[Row]) -> list[ClaimMap]:
    """Every claim as a map over the cells of the done rows."""
    done = [r for r in rows if r.get("status") == "done"]
    compare = C.unique(r for r in done if r.get("kind") == "compare")
    attribute = [r for r in done if r.get("kind") == "attribute"]
    out = []
    for claim_id, check in _CHECKS.items():
        figure, claim = CLAIMS[claim_id]
        value_label, cells = check(compare, attribute)
        out.append(ClaimMap(claim_id=claim_id, figure=figure, claim=claim, value_label=value_label,
                            cells=tuple(cells), note=BY_CONSTRUCTION.get(claim_id, "")))
    return out


def compute_findings(rows: list[Row], maps: list[ClaimMap] | None = None) -> list[Finding]:
    """Each claim's map summarised per (policy, variant) present in the compare rows."""
    maps = compute_maps(rows) if maps is None else maps
    compare = [r for r in rows if r.get("kind") == "compare" and r.get("status") == "done"]
    policies = sorted({r["config"].get("policy") for r in compare})
    variants = sorted({r["config"].get("variant") for r in compare})
    out = []
    for m in maps:
        for policy in policies:
            for variant in variants:
                mine = tuple(c for c in m.cells if c.coords.get("policy") == policy
                             and c.coords.get("variant") == variant)
                verdict = _overall([c.verdict for c in mine])
                numbers = mine[0].numbers if len(mine) == 1 else {"cells": len(mine)}
                out.append(Finding(claim_id=m.claim_id, figure=m.figure, claim=m.claim, policy=policy,
                                   variant=variant, verdict=verdict, measured=m.summary(mine), numbers=numbers))
    return out


def _overall(verdicts: list[str]) -> str:
    tested = [v for v in verdicts if v != "not tested"]
    if not tested:
        return "not tested"
    if len(set(tested)) == 1:
        return tested[0]
    if set(tested) == {"holds", "holds by construction"}:
        return "holds"
    return "mixed"


def _median(rows: list[Row], path: str) -> float | None:
    xs = [v for r in rows if (v := metric(r, path)) is not None and math.isfinite(v)]
    return statistics.median(xs) if xs else None


def _trend_cells(rows: list[Row], x: str, paths: tuple[str, ...], sign: int, *, exclude: tuple[str, ...] = (),
                 x_label: str | None = None) -> list[Cell]:
    """One cell per configuration: Spearman rho of the seed-median of each path against ``x``."""
    fields = C.cell_fields(rows, exclude=(x, *exclude))
    out = []
    for key, sub in C.split(rows, fields).items():
        coords = dict(zip(fields, key))
        by_x: dict[Any, list[Row]] = {}
        for r in sub:
            by_x.setdefault(C.coordinate(r, x), []).append(r)
        xs = sorted(k for k in by_x if k is not None)
        series = {p: [(xv, _median(by_x[xv], p)) for xv in xs] for p in paths}
        series = {p: [(xv, y) for xv, y in s if y is not None] for p, s in series.items()}
        if any(len(s) < 3 for s in series.values()):
            out.append(Cell(coords=coords, verdict="not tested", value=math.nan,
                            text=f"{C.describe(coords)}: fewer than 3 values of {x_label or x}"))
            continue
        rhos = {p: spearman([a for a, _ in s], [b for _, b in s]) for p, s in series.items()}
        first = series[paths[0]]
        (x0, y0), (x1, y1) = first[0], first[-1]
        holds = all(sign * rho >= TREND_RHO for rho in rhos.values())
        text = (f"{C.describe(coords)}: {paths[0].split('.', 1)[1]} {y0:.2e} at {x_label or x}={x0} -> {y1:.2e} at "
                f"{x1} ({y1 / y0 if y0 else math.inf:.2g}x); "
                + ", ".join(f"rho({p.split('.', 1)[1]}) = {r:.2f}" for p, r in rhos.items())
                + f" over {len(first)} values")
        out.append(Cell(coords=coords, verdict=C.trend_verdict(holds), value=rhos[paths[0]], text=text,
                        numbers={"rho": rhos[paths[0]], **{f"rho_{p}": r for p, r in rhos.items()},
                                 "growth": y1 / y0 if y0 else math.inf}))
    return out


def _mantissa(rows: list[Row], _attr: list[Row]) -> tuple[str, list[Cell]]:
    out = []
    for group in ("fig3", "fig3-e8", "fig3-e11"):
        sub = [dict(r, config={**r["config"], "mbits": int(metric(r, "format_bits.mbits") or 0)})
               for r in C.select(rows, (group,))]
        for c in _trend_cells(sub, "mbits", (C.FLASH_VS_BASELINE,), -1, exclude=("format",), x_label="mantissa bits"):
            out.append(dataclasses.replace(c, coords={"group": group, **c.coords}))
    return "rho", out or C.not_tested("no rows in groups fig3, fig3-e8, fig3-e11")


def _ten_x(rows: list[Row], attribute: list[Row]) -> tuple[str, list[Cell]]:
    sub = C.select(rows, ("fig4", *GRID, "eager"), format=HEADLINE_FORMAT)
    if not sub:
        return "ratio", C.not_tested(f"no {HEADLINE_FORMAT} rows in groups fig4, {', '.join(GRID)}, eager")
    fields = C.cell_fields(sub, exclude=("format",))
    out = []
    for key, cell_rows in C.split(sub, fields).items():
        coords = dict(zip(fields, key))
        ratios = [v for r in cell_rows if (v := metric(r, "ratio.max_abs")) is not None]
        means = [v for r in cell_rows if (v := metric(r, "ratio.mean_abs")) is not None]
        if not ratios:
            continue
        s = seed_summary(ratios)
        ratio = s["median"]
        text = (f"{C.describe(coords)}: flash/baseline max error vs golden {ratio:.2g}x (median of {s['n']} per-seed "
                f"ratios, {s['min']:.2g}..{s['max']:.2g})")
        if means:
            text += f"; mean error ratio {statistics.median(means):.2g}x"
        bias = {impl: _median(cell_rows, f"{impl}_vs_golden.bias") for impl in ("flash", "baseline")}
        if None not in bias.values():
            # mean(e * sign(golden)) / mean|e|: +1 when every error enlarges |O| (a row sum that stops growing)
            text += f"; magnitude bias flash {bias['flash']:+.2f}, baseline {bias['baseline']:+.2f}"
        site = _dominant(attribute, cell_rows[0])
        if site:
            text += f"; dominant site: {site}"
        numbers = {"ratio": ratio, "seq_len": cell_rows[0]["config"]["seq_len"], "seeds": s["n"],
                   "dominant_site": site, "bias_flash": bias["flash"], "bias_baseline": bias["baseline"]}
        tc = ((cell_rows[0].get("metrics") or {}).get("tiles") or {}).get("Tc")
        if tc:
            numbers["Tc"] = int(tc)
            text += f"; Tc = {int(tc)} KV tiles per row"
        out.append(Cell(coords=coords, verdict=C.trend_verdict(TEN_X_BAND[0] <= ratio <= TEN_X_BAND[1]), value=ratio,
                        text=text, numbers=numbers))
    return "median per-seed ratio", out


def _dominant(attribute: list[Row], like: Row) -> str | None:
    """The dominant site recorded by an attribute point at ``like``'s configuration (any seed)."""
    keys = [k for k in like["config"] if k not in ("seed", "kind")]
    for r in attribute:
        if all(r["config"].get(k) == like["config"].get(k) for k in keys):
            d = ((r.get("metrics") or {}).get("dominant") or {}).get("flash")
            if d:
                return f"{d['site']} (alone {d['alone']:.2f} of flash's error, seed {r['config'].get('seed')})"
    return None


def _seq_len(rows: list[Row], _attr: list[Row]) -> tuple[str, list[Cell]]:
    sub = C.select(rows, ("fig5", *GRID))
    if not sub:
        return "rho", C.not_tested(f"no rows in groups fig5, {', '.join(GRID)}")
    return "rho(rel max)", _trend_cells(sub, "seq_len", (REL_MAX, REL_MEAN), +1, x_label="N")


def _tiles(rows: list[Row], _attr: list[Row]) -> tuple[str, list[Cell]]:
    sub = [r for r in C.select(rows, ("fig6c", *GRID)) if not r["config"].get("swap_blocks")
           and not r["config"].get("square") and r["config"]["format"] != "fp64"]
    if not sub:
        return "rho", C.not_tested(f"no rows in groups fig6c, {', '.join(GRID)}")
    return "rho", _trend_cells(sub, "Bc", (C.FLASH_VS_BASELINE,), -1, exclude=("Br",))


_CHECKS: dict[str, Callable[[list[Row], list[Row]], tuple[str, list[Cell]]]] = {
    "mantissa": _mantissa,
    "ten_x": _ten_x,
    "seq_len": _seq_len,
    "swap": swap_cells,
    "square": square_cells,
    "tiles": _tiles,
}
