"""Cells of a grid of stored rows: configurations kept apart, never pooled silently.

A *cell* is every row that agrees on every config field except the swept axis and the seed. Which
fields count is decided by the data: any field whose value differs between the rows is a coordinate
(plus ``policy`` and ``variant``, always named). Tile fields (``block_q``, ``block_k``, ``sram``,
``swap_blocks``, ``square``) are replaced by the tiles the point ran with, ``Bc`` and ``Br``: in the
forward pass a row's arithmetic depends on Bc alone, so two spellings of the same tiles are one cell.
Pure functions over rows; no numerics.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from attnum.sweep.results import LABELS, Row, metric, values

FLASH_VS_BASELINE = "flash_vs_baseline.max_abs"  # the metric the paper's figures plot
TILE_FIELDS = ("block_q", "block_k", "sram", "swap_blocks", "square")
ALWAYS = ("policy", "variant")
# Display names of coordinates, for tables and sentences.
EVERYWHERE = "everywhere in the grid"
_ORDER = ("group", "format", "policy", "baseline_policy", "variant", "dist", "seq_len", "Bc", "Br")


def tiles_of(row: Row) -> dict[str, int | None]:
    t = (row.get("metrics") or {}).get("tiles") or {}
    return {"Bc": t.get("Bc"), "Br": t.get("Br")}


def coordinate(row: Row, field: str) -> Any:
    """A config field, or ``Bc``/``Br`` as the point ran (from its recorded tiles)."""
    if field in ("Bc", "Br"):
        return tiles_of(row)[field]
    return row["config"].get(field)


def unique(rows: Iterable[Row]) -> list[Row]:
    """Rows by key, once each (a point shared by several groups is stored once but selected twice)."""
    return list({r["key"] if "key" in r else id(r): r for r in rows}.values())


def cell_fields(rows: list[Row], *, exclude: Iterable[str] = ()) -> list[str]:
    """The coordinates that tell the rows' cells apart (see the module docstring)."""
    exclude = set(exclude) | {"seed"} | set(TILE_FIELDS)
    names = dict.fromkeys(k for r in rows for k in r["config"])
    names.update({"Bc": None, "Br": None})
    varying = [k for k in names if k not in exclude and len({repr(coordinate(r, k)) for r in rows}) > 1]
    fields = [k for k in ALWAYS if k not in exclude] + [k for k in varying if k not in ALWAYS]
    return sorted(fields, key=lambda k: (_ORDER.index(k) if k in _ORDER else len(_ORDER), k))


def split(rows: list[Row], fields: list[str]) -> dict[tuple, list[Row]]:
    """Rows grouped by their values of ``fields`` (first-seen order)."""
    out: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        out[tuple(coordinate(r, f) for f in fields)].append(r)
    return dict(out)


def label(field: str, value: Any) -> str:
    if field == "baseline_policy" and value is None:
        return "baseline=same policy"
    return f"{LABELS.get(field, field)}={value}"


def describe(coords: dict[str, Any]) -> str:
    return ", ".join(label(k, v) for k, v in coords.items())


def region(where: list[dict[str, Any]], everywhere: list[dict[str, Any]]) -> str:
    """Where a set of cells lies in the grid, as a sentence computed from their coordinates.

    Each coordinate whose values in ``where`` are fewer than in the whole grid is named with those
    values ("policy=uniform; N in {4096, 8192}; Bc in {16, 32}"); the rest are everywhere.
    """
    if not where:
        return "nowhere"
    parts = []
    for field in everywhere[0]:
        mine = _sorted({c[field] for c in where})
        allv = _sorted({c[field] for c in everywhere})
        if len(mine) == len(allv):
            continue
        name = LABELS.get(field, field)
        parts.append(label(field, mine[0]) if len(mine) == 1 else f"{name} in {{{', '.join(map(str, mine))}}}")
    return "; ".join(parts) if parts else EVERYWHERE


def _sorted(values: set) -> list:
    return sorted(values, key=lambda v: (v is None, isinstance(v, str), v if not isinstance(v, str) else 0, str(v)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cell:
    coords: dict[str, Any]
    verdict: str
    value: float  # the number the rule judged
    text: str
    numbers: dict[str, Any] = dataclasses.field(default_factory=dict)


def trend_verdict(ok: bool) -> str:
    return "holds" if ok else "does not hold"


def select(rows: list[Row], groups: tuple[str, ...], **config: Any) -> list[Row]:
    """Rows in any of ``groups`` whose config has every given field value."""
    return [r for r in rows if set(r.get("groups", ())) & set(groups)
            and all(r["config"].get(k) == v for k, v in config.items())]


def not_tested(text: str) -> list[Cell]:
    return [Cell(coords={}, verdict="not tested", value=math.nan, text=text)]


def mbits(rows: list[Row], fmt: str) -> float:
    """Mantissa bits of ``fmt`` as the rows recorded them (0 when none did)."""
    return next((m for r in rows if r["config"]["format"] == fmt and (m := metric(r, "format_bits.mbits"))), 0.0)


def formats_by_mbits(rows: list[Row]) -> list[str]:
    return sorted(values(rows, "format"), key=lambda f: (mbits(rows, f), f))


def policies(rows: list[Row]) -> list[str]:
    return sorted(values(rows, "policy"))
