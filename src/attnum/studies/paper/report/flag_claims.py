"""Figs. 6a and 6b: a flag's effect judged on paired points (same seed and config but the flag).

"worse" / "no effect" compare the pairs whose tiles the flag changed by the geometric mean of their
ratio against EFFECT (10%); Fig. 6a also pairs each swapped point with the unswapped point that has
the same Bc, which separates the swap itself from the change of Bc it causes.
"""

from __future__ import annotations

import math

from attnum.studies.paper.report import cells as C
from attnum.studies.paper.report.cells import Cell
from attnum.sweep.results import Row, geomean, metric

EFFECT = 1.1


def _pairs(rows: list[Row], flag: str) -> dict[tuple, dict[bool, Row]]:
    pairs: dict[tuple, dict[bool, Row]] = {}
    for r in rows:
        rest = tuple(sorted((k, repr(v)) for k, v in r["config"].items() if k != flag))
        pairs.setdefault(rest, {})[bool(r["config"].get(flag))] = r
    return {k: p for k, p in pairs.items() if True in p and False in p}


def _ratio(a: Row, b: Row) -> float | None:
    x, y = metric(a, C.FLASH_VS_BASELINE), metric(b, C.FLASH_VS_BASELINE)
    return x / y if x is not None and y else None


def _flag_cells(rows: list[Row], group: str, flag: str, same_bc: list[Row] | None = None) -> list[Cell]:
    sub = [r for r in C.select(rows, (group,)) if r["config"]["format"] != "fp64"]
    fields = C.cell_fields(sub, exclude=(flag, "Bc", "Br"))
    out = []
    for key, cell_rows in C.split(sub, fields).items():
        coords = dict(zip(fields, key))
        changed = [p for p in _pairs(cell_rows, flag).values() if C.tiles_of(p[True]) != C.tiles_of(p[False])]
        ratios = [x for p in changed if (x := _ratio(p[True], p[False])) is not None]
        if not ratios:
            out.append(Cell(coords=coords, verdict="not tested", value=math.nan,
                            text=f"{C.describe(coords)}: no pair where {flag} changed the tiles"))
            continue
        g = geomean(ratios)
        bcs = sorted({(C.tiles_of(p[False])["Bc"], C.tiles_of(p[True])["Bc"]) for p in changed})
        text = (f"{C.describe(coords)}: {flag}/default max |flash - baseline| geometric mean {g:.2f}x over "
                f"{len(ratios)} pairs (pooled over the SRAM sizes and seeds; Bc "
                + ", ".join(f"{a}->{b}" for a, b in bcs) + ")")
        numbers = {"geomean_ratio": g, "pairs": len(ratios)}
        if flag == "square":
            same = all(a == b for a, b in bcs)
            verdict = "holds by construction" if same and 1 / EFFECT <= g <= EFFECT else "does not hold"
        else:
            verdict = C.trend_verdict(g > EFFECT)
            eq = [x for p in changed if (x := _same_bc_ratio(p[True], same_bc or [])) is not None]
            if eq:
                ge = geomean(eq)
                numbers["same_bc_ratio"] = ge
                text += (f"; swapped vs unswapped at the same Bc: {ge:.2f}x over {len(eq)} pairs, so the swap acts "
                         "only through the Bc it sets" if 1 / EFFECT <= ge <= EFFECT else
                         f"; swapped vs unswapped at the same Bc: {ge:.2f}x over {len(eq)} pairs")
        out.append(Cell(coords=coords, verdict=verdict, value=g, text=text, numbers=numbers))
    return out


def _same_bc_ratio(swapped: Row, pool: list[Row]) -> float | None:
    """swapped / the unswapped point equal in everything but the tile fields, with the same Bc."""
    want = C.tiles_of(swapped)["Bc"]
    rest = {k: v for k, v in swapped["config"].items() if k not in C.TILE_FIELDS}
    for r in pool:
        if (not r["config"].get("swap_blocks") and not r["config"].get("square") and C.tiles_of(r)["Bc"] == want
                and all(r["config"].get(k) == v for k, v in rest.items())):
            return _ratio(swapped, r)
    return None


def swap_cells(rows: list[Row], _attr: list[Row]) -> tuple[str, list[Cell]]:
    pool = C.select(rows, ("fig6a", "fig6c"))
    return "geomean swapped/normal", _flag_cells(rows, "fig6a", "swap_blocks", pool) or C.not_tested("no rows in fig6a")


def square_cells(rows: list[Row], _attr: list[Row]) -> tuple[str, list[Cell]]:
    return "geomean square/default", _flag_cells(rows, "fig6b", "square") or C.not_tested("no rows in fig6b")
