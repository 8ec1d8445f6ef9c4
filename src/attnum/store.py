"""The results store: one SQLite database per output folder (``DIR/attnum.sqlite``).

Tables:
- ``meta``: the spec (name, hash, canonical JSON) the folder belongs to; a folder never mixes specs.
- ``planned``: every point the spec asks for (key, kind, groups, config), so completeness is known.
- ``points``: one row per finished point (done or failed) with metrics, timing, environment id, run.
- ``runs``: one row per invocation (command, start/end, status).
- ``environments``: distinct environments (versions, device, git commit), referenced by points.

Each point is committed as soon as it is written, in WAL mode: a crash, kill -9 or Ctrl-C loses at
most the points in flight, and the ``points`` primary key makes a duplicate impossible.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnum.errors import AttnumInputError, bad_value

DB_NAME = "attnum.sqlite"
SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS planned (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, groups TEXT NOT NULL, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT, command TEXT, started_at REAL NOT NULL,
    finished_at REAL, status TEXT NOT NULL, n_todo INTEGER, executor TEXT, jobs INTEGER);
CREATE TABLE IF NOT EXISTS environments (env_id TEXT PRIMARY KEY, env TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS points (
    key TEXT PRIMARY KEY REFERENCES planned(key), status TEXT NOT NULL, metrics TEXT, error TEXT,
    run_id INTEGER REFERENCES runs(run_id), env_id TEXT REFERENCES environments(env_id),
    started_at REAL, wall_s REAL, worker TEXT, written_at REAL NOT NULL);
"""


class Store:
    """An open results database. Only the driver process writes; workers return plain results."""

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        path = Path(path)
        self.path = path / DB_NAME if path.is_dir() or path.suffix != ".sqlite" else path
        if not create and not self.path.is_file():
            raise bad_value("out", str(path), f"a folder holding {DB_NAME} (a results store)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we commit explicitly, one transaction per point.
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable against a killed process (WAL); only a power cut could lose the tail.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._envs: set[str] = set()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- spec binding -----------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta"))

    def bind_spec(self, *, name: str, spec_hash: str, canonical: dict[str, Any], source: str) -> None:
        """Claim an empty folder for a spec, or check that it already holds that same spec."""
        held = self.meta()
        if "spec_hash" in held:
            if held["spec_hash"] != spec_hash:
                raise AttnumInputError(
                    f"{self.path.parent}: out holds results of a different spec "
                    f"({held.get('spec_name')!r}, hash {held['spec_hash']}) than {source} "
                    f"({name!r}, hash {spec_hash}); expected an empty folder or one made by this spec"
                )
            return
        rows = {
            "schema": SCHEMA_VERSION,
            "spec_name": name,
            "spec_hash": spec_hash,
            "spec_json": json.dumps(canonical, sort_keys=True),
            "spec_source": source,
            "created_at": repr(time.time()),
        }
        with self._tx():
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows.items())

    def spec(self) -> dict[str, Any] | None:
        raw = self.meta().get("spec_json")
        return json.loads(raw) if raw else None

    # ---- planning and runs ------------------------------------------------------------------
    def plan(self, planned: Iterable[tuple[str, str, tuple[str, ...], dict[str, Any]]]) -> None:
        """Record (key, kind, groups, config) of every point the spec asks for (idempotent)."""
        rows = [(k, kind, json.dumps(list(g)), json.dumps(c, sort_keys=True)) for k, kind, g, c in planned]
        with self._tx():
            self._db.executemany("INSERT OR IGNORE INTO planned VALUES (?, ?, ?, ?)", rows)

    def done_keys(self) -> set[str]:
        """Keys that need no rerun: points done. Failed points are retried on resume."""
        return {k for (k,) in self._db.execute("SELECT key FROM points WHERE status = 'done'")}

    def begin_run(self, *, command: str, n_todo: int, executor: str, jobs: int) -> int:
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO runs (command, started_at, status, n_todo, executor, jobs) VALUES (?,?,?,?,?,?)",
                (command, time.time(), "running", n_todo, executor, jobs),
            )
        return int(cur.lastrowid)

    def end_run(self, run_id: int, status: str) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE run_id = ?", (time.time(), status, run_id)
            )

    # ---- results ----------------------------------------------------------------------------
    def write(self, result: dict[str, Any], run_id: int) -> None:
        """Commit one point's result; a retried (failed) point replaces its row, never duplicates."""
        env = result.get("env") or {}
        env_json = json.dumps(env, sort_keys=True)
        env_id = hashlib.sha256(env_json.encode()).hexdigest()[:16]
        with self._tx():
            if env_id not in self._envs:
                self._db.execute("INSERT OR IGNORE INTO environments VALUES (?, ?)", (env_id, env_json))
                self._envs.add(env_id)
            self._db.execute(
                "INSERT INTO points VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                "status=excluded.status, metrics=excluded.metrics, error=excluded.error, "
                "run_id=excluded.run_id, env_id=excluded.env_id, started_at=excluded.started_at, "
                "wall_s=excluded.wall_s, worker=excluded.worker, written_at=excluded.written_at",
                (
                    result["key"],
                    result["status"],
                    json.dumps(result.get("metrics")) if result.get("metrics") is not None else None,
                    result.get("error"),
                    run_id,
                    env_id,
                    result.get("started_at"),
                    result.get("wall_s"),
                    result.get("worker"),
                    time.time(),
                ),
            )

    def rows(self, *, kind: str | None = None, status: str | None = "done") -> list[dict[str, Any]]:
        """Planned points joined with their results; ``status=None`` includes missing ones."""
        sql = (
            "SELECT p.key, p.kind, p.groups, p.config, r.status, r.metrics, r.error, r.run_id, "
            "r.env_id, r.started_at, r.wall_s, r.worker FROM planned p LEFT JOIN points r ON r.key = p.key"
        )
        where, args = [], []
        if kind is not None:
            where.append("p.kind = ?")
            args.append(kind)
        if status is not None:
            where.append("r.status = ?")
            args.append(status)
        if where:
            sql += " WHERE " + " AND ".join(where)
        out = []
        for key, kind_, groups, config, st, metrics, error, run_id, env_id, started, wall, worker in (
            self._db.execute(sql + " ORDER BY p.rowid", args)
        ):
            out.append(
                {
                    "key": key,
                    "kind": kind_,
                    "groups": json.loads(groups),
                    "config": json.loads(config),
                    "status": st or "missing",
                    "metrics": json.loads(metrics) if metrics else None,
                    "error": error,
                    "run_id": run_id,
                    "env_id": env_id,
                    "started_at": started,
                    "wall_s": wall,
                    "worker": worker,
                }
            )
        return out

    def environments(self) -> dict[str, dict[str, Any]]:
        return {k: json.loads(v) for k, v in self._db.execute("SELECT env_id, env FROM environments")}

    def counts(self) -> dict[str, int]:
        """Planned, done, failed and missing point counts."""
        planned = self._db.execute("SELECT COUNT(*) FROM planned").fetchone()[0]
        by = dict(self._db.execute("SELECT status, COUNT(*) FROM points GROUP BY status"))
        done, failed = by.get("done", 0), by.get("failed", 0)
        return {"planned": planned, "done": done, "failed": failed, "missing": planned - done - failed}

    def runs(self) -> list[dict[str, Any]]:
        """Each run with how many points it wrote (done / failed)."""
        written = {
            (rid, st): n
            for rid, st, n in self._db.execute("SELECT run_id, status, COUNT(*) FROM points GROUP BY run_id, status")
        }
        cols = ("run_id", "command", "started_at", "finished_at", "status", "n_todo", "executor", "jobs")
        out = []
        for row in self._db.execute(f"SELECT {', '.join(cols)} FROM runs ORDER BY run_id"):
            rec = dict(zip(cols, row))
            rec["done"] = written.get((rec["run_id"], "done"), 0)
            rec["failed"] = written.get((rec["run_id"], "failed"), 0)
            out.append(rec)
        return out

    def _tx(self):
        return _Transaction(self._db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT: one writer, and a point is either fully in the file or absent."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *exc: object) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")


def open_store(out_dir: str | Path) -> Store:
    """Open an existing folder's store for reading (runs, export, report)."""
    path = Path(out_dir)
    if not (path / DB_NAME).is_file():
        raise bad_value("out", str(path), f"a folder holding {DB_NAME}; run `attnum sweep` or `attnum reproduce` "
                        "first")
    return Store(path, create=False)
