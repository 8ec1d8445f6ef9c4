"""Export a store as one flat table: ``config.*``, ``metrics.*`` (dotted paths) and ``env.*`` columns."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from attnum.errors import bad_value
from attnum.store.db import open_store
from attnum.store.outfile import check_output, write_atomic

FORMATS = ("csv", "parquet")


def flat_rows(out_dir: str | Path) -> list[dict[str, Any]]:
    """Every planned point (done, failed or missing) as a flat dict."""
    with open_store(out_dir) as store:
        rows, envs = store.rows(status=None), store.environments()
    flat = []
    for r in rows:
        rec: dict[str, Any] = {
            "key": r["key"], "kind": r["kind"], "groups": ";".join(r["groups"]), "status": r["status"],
            "error": r["error"], "run_id": r["run_id"], "started_at": r["started_at"], "wall_s": r["wall_s"],
            "worker": r["worker"],
        }
        rec.update({f"config.{k}": v for k, v in r["config"].items()})
        _flatten("metrics", r["metrics"] or {}, rec)
        rec.update({f"env.{k}": v for k, v in envs.get(r["env_id"], {}).items()})
        flat.append(rec)
    return flat


def export_points(out_dir: str | Path, *, to: str = "csv", output: str | Path | None = None) -> Path:
    """Write the flat table to ``output`` (default ``out_dir/points.{csv,parquet}``); returns the path.

    ``output`` may name a folder: the table goes into it as ``points.{csv,parquet}``."""
    if to not in FORMATS:
        raise bad_value("--to", to, f"one of {FORMATS}")
    if isinstance(output, str) and not output.strip():
        raise bad_value("-o", output, "a file name")
    path = Path(output) if output is not None else Path(out_dir) / f"points.{to}"
    if path.is_dir():
        path = path / f"points.{to}"
    if not path.parent.is_dir():
        raise bad_value("-o", str(output), f"a file in an existing folder ({path.parent} is not a folder)")
    check_output(path, "-o")  # never the store, its WAL or its lock; written whole (temp file, rename)
    rows = flat_rows(out_dir)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    if to == "csv":
        def write_csv(tmp: Path) -> None:
            with tmp.open("w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=columns)
                writer.writeheader()
                writer.writerows(rows)

        return write_atomic(path, write_csv)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise bad_value("--to", to, "csv (parquet needs pyarrow: pip install 'attnum[parquet]')") from None
    # Columns mix ints, floats, strings and None across kinds; give each one type.
    table = pa.table({c: _column([r.get(c) for r in rows]) for c in columns})
    return write_atomic(path, lambda tmp: pq.write_table(table, tmp))


def _column(values: list[Any]) -> list[Any]:
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float} and kinds - {bool}:
        return [None if v is None else float(v) for v in values]
    if kinds == {bool}:
        return values
    return [None if v is None else str(v) for v in values]


def _flatten(prefix: str, node: Any, out: dict[str, Any]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _flatten(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = node
