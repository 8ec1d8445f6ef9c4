"""The headline cells under the tensor-core models: the ``grid-mma`` group's rows beside the grid's exact ones.

    cells = mma_cells(rows)    # one MmaCell per (policy, variant, N, Bc) that grid-mma ran
    mma_sentence(cells)        # what changed, in one or two sentences computed from the cells

A cell's number is the Fig. 4 number: the median over seeds of flash's max error against the fp64 golden
divided by the baseline's. ``exact`` is the grid's row of the same configuration and seed (the policies'
own matmul model); each architecture (``sm80``, ``sm90``) is the same configuration with both flash's and
the baseline's matmuls run as that GPU's tensor-core instructions (:mod:`attnum.numerics.mma.dense`). Only the
seeds present under every model enter a cell, so the columns compare like with like.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnum.sweep.results import Row, metric, seed_summary

GROUP = "grid-mma"
EXACT = "exact"
_COORDS = ("policy", "variant", "seq_len", "block_k")


@dataclass(frozen=True)
class MmaCell:
    """One configuration: ``coords`` (policy, variant, seq_len, block_k), the seeds used, and per model
    (``exact``, then each architecture) the median per-seed flash/baseline ratio of max errors, of mean errors,
    and flash's median max error."""

    coords: tuple
    seeds: tuple[int, ...]
    ratio: dict[str, float]
    mean_ratio: dict[str, float]
    flash_err: dict[str, float]


def _key(config: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in config.items() if k != "mma"))


def mma_cells(rows: list[Row]) -> list[MmaCell]:
    """The grid-mma cells with their exact counterparts (empty when the store has no grid-mma row)."""
    done = [r for r in rows if r.get("kind") == "compare" and r.get("status") == "done"]
    tc = [r for r in done if GROUP in r["groups"] and r["config"].get("mma")]
    exact = {_key(r["config"]): r for r in done if not r["config"].get("mma")}
    archs = sorted({r["config"]["mma"] for r in tc})
    by_cell: dict[tuple, dict[int, dict[str, Row]]] = {}
    for r in tc:
        cfg = r["config"]
        seeds = by_cell.setdefault(tuple(cfg.get(c) for c in _COORDS), {})
        models = seeds.setdefault(cfg["seed"], {})
        models[cfg["mma"]] = r
        if _key(cfg) in exact:
            models[EXACT] = exact[_key(cfg)]
    out = []
    for coords, seeds in sorted(by_cell.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        full = sorted(s for s, models in seeds.items() if all(m in models for m in (EXACT, *archs)))
        if not full:
            continue
        ratio, mean, err = {}, {}, {}
        for model in (EXACT, *archs):
            ratio[model] = _median([metric(seeds[s][model], "ratio.max_abs") for s in full])
            mean[model] = _median([metric(seeds[s][model], "ratio.mean_abs") for s in full])
            err[model] = _median([metric(seeds[s][model], "flash_vs_golden.max_abs") for s in full])
        out.append(MmaCell(coords=coords, seeds=tuple(full), ratio=ratio, mean_ratio=mean, flash_err=err))
    return out


def _median(xs: list) -> float:
    xs = [x for x in xs if x is not None]
    return seed_summary(xs)["median"] if xs else math.nan


def _describe(c: MmaCell) -> str:
    policy, variant, n, bc = c.coords
    return f"{policy} / {variant}, N = {n}, Bc = {bc}"


def mma_sentence(cells: list[MmaCell], band_lo: float) -> str:
    """How far the tensor-core models move the cells' ratio from the exact model, and whether any cell
    crosses ``band_lo`` (the "about 10x" band's lower edge) because of them. '' without cells."""
    if not cells:
        return ""
    archs = [m for m in cells[0].ratio if m != EXACT]
    moves = [(abs(c.ratio[a] / c.ratio[EXACT] - 1), a, c) for c in cells for a in archs
             if math.isfinite(c.ratio[a]) and c.ratio[EXACT] > 0]
    if not moves:
        return ""
    worst, arch, cell = max(moves, key=lambda m: m[0])
    head = (f"Run as {' and '.join(archs)} tensor-core instructions (both flash's and the baseline's matmuls), "
            f"the {len(cells)} cells' flash / baseline ratio")
    if worst == 0:
        text = f"{head} does not move from the exact model in any cell, to the last bit of the stored ratio"
    else:
        text = (f"{head} moves by at most {worst:.2%} from the exact model ({arch}, {_describe(cell)}: "
                f"{cell.ratio[EXACT]:.4g}x exact, {cell.ratio[arch]:.4g}x)")
    means = [abs(c.mean_ratio[a] / c.mean_ratio[EXACT] - 1) for c in cells for a in archs
             if math.isfinite(c.mean_ratio.get(a, math.nan)) and c.mean_ratio.get(EXACT, 0) > 0]
    if means:
        text += f"; the ratio of mean errors moves by at most {max(means):.3%}"
    text += "."
    flips = [(a, c) for c in cells for a in archs if (c.ratio[a] >= band_lo) != (c.ratio[EXACT] >= band_lo)]
    if flips:
        text += (f" {len(flips)} of them cross the {band_lo:.2g}x line the headline uses: "
                 + "; ".join(f"{_describe(c)} under {a} ({c.ratio[EXACT]:.3g}x -> {c.ratio[a]:.3g}x)"
                             for a, c in flips) + ".")
    else:
        text += f" No cell crosses the {band_lo:.2g}x line the headline uses: the verdicts stand as they are."
    return text
