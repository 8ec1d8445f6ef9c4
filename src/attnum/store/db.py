"""The results store: one SQLite database per output folder (``DIR/attnum.sqlite``).

Tables:
- ``meta``: the spec (name, hash, canonical JSON) the folder belongs to; a folder never mixes specs.
- ``planned``: every point the spec asks for (key, kind, groups, config), so completeness is known.
- ``points``: one row per finished point (done or failed) with metrics, timing, environment id, run.
- ``runs``: one row per invocation (command, start/end, status, and the pid, host and process start
  time of its driver, so a run whose process is gone reads ``killed``, not ``running``).
- ``environments``: distinct environments (versions, device, git commit), referenced by points.

Writing (``Store(DIR)``) takes ``DIR/attnum.lock`` (one writer per folder), refuses a file that is
not an attnum store before writing anything, and commits each point as soon as it is written, in
WAL mode: a crash, kill -9 or Ctrl-C loses at most the points in flight. A done row is never
replaced (a re-run skips it; a failed point's retry may replace the failed row). The WAL is folded
into the main file (checkpoint TRUNCATE) when a writer opens (rows a killed run left in ``-wal``),
every ``CHECKPOINT_EVERY_S`` while it runs, at the end of every run and on close, so a copy of
``attnum.sqlite`` alone holds every committed row once a run has ended.

The store is three modules: the schema, its version and its migration (``attnum.store.schema``),
the reading half (``attnum.store.read``: rows of the wrong shape are reported and skipped) and the
writer here; every public name stays importable from ``attnum.store.db``.

Reading (``open_store(DIR)``) opens the file read-only (``mode=ro``): no schema, no checkpoint, the
file's bytes and mtime stay as they were. Every SQLite or disk failure is one line naming the file
and what to do (:class:`~attnum.errors.AttnumEnvironmentError`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnum.errors import AttnumEnvironmentError, bad_value
from attnum.sandbox.processes import this_process
from attnum.store.file import check_attnum, check_header, connect_readonly, guard
from attnum.store.lock import FolderLock
from attnum.store.outdir import make_out_folder
from attnum.store.read import StoreReader
from attnum.store.schema import _SCHEMA, DB_NAME, RUN_PROCESS_COLUMNS, SCHEMA_VERSION, check_version, create_or_migrate

__all__ = ["CHECKPOINT_EVERY_S", "DB_NAME", "SCHEMA_VERSION", "Store", "StoreReader", "open_store", "_SCHEMA"]

CHECKPOINT_EVERY_S = 10.0


class Store(StoreReader):
    """An open results database. Only the driver process writes; workers return plain results.

    ``Store(DIR)`` opens (or creates) DIR's store for writing; ``Store(DIR, readonly=True)`` (or
    :func:`open_store`) opens an existing one read-only.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False, command: str | None = None) -> None:
        self.folder = Path(path)
        self.path = self.folder / DB_NAME
        self.readonly = readonly
        self._lock: FolderLock | None = None
        self._db: sqlite3.Connection | None = None
        self._envs: set[str] = set()
        self.skipped: list[tuple] = []
        self._has_process_cols = True
        self._last_checkpoint = time.monotonic()
        if readonly:
            if not self.path.is_file():
                raise bad_value("out", str(self.folder), f"a folder holding {DB_NAME}; run `attnum sweep` or "
                                "`attnum reproduce` first")
            self._check_header(empty_ok=False)
            self._db = self._connect_readonly()
            self._check_attnum()
            return
        make_out_folder(self.folder)
        if self.path.is_file() and self.path.stat().st_size:
            # Look before writing anything (the lock file included): never alter another program's file.
            self._check_header(empty_ok=True)
            self._db = self._connect_readonly()
            try:
                self._check_attnum()
            finally:
                self._db.close()
                self._db = None
        self._lock = FolderLock(self.folder, command)
        try:
            self._db = self._guard(sqlite3.connect, self.path, timeout=30, isolation_level=None)
            self._q("PRAGMA journal_mode=WAL")
            # NORMAL is durable against a killed process (WAL); only a power cut could lose the tail.
            self._q("PRAGMA synchronous=NORMAL")
            create_or_migrate(self._q, lambda script: self._guard(self._db.executescript, script))
            self._has_process_cols = True
            self.checkpoint()  # rows a killed run left in -wal go into the main file now
            self._mark_killed_runs()
        except BaseException:
            self.close()
            raise

    # ---- connection, errors -----------------------------------------------------------------
    def _check_header(self, *, empty_ok: bool) -> None:
        check_header(self.path, empty_ok=empty_ok)

    def _connect_readonly(self) -> sqlite3.Connection:
        return connect_readonly(self.path)

    def _check_attnum(self) -> None:
        tables = check_attnum(self._db, self.path)
        cols = {row[1] for row in self._q("PRAGMA table_info(runs)")} if "runs" in tables else set()
        self._has_process_cols = set(RUN_PROCESS_COLUMNS) <= cols
        if "meta" in tables:  # a newer attnum's store: refused before anything reads or writes it
            check_version(dict(self._q("SELECT key, value FROM meta")).get("schema"), self.path)

    def _guard(self, fn, *args, **kwargs):
        return guard(self.path, fn, *args, **kwargs)

    def checkpoint(self, mode: str = "TRUNCATE") -> None:
        """Fold the WAL into the main file (writers only)."""
        if self._db is not None and not self.readonly:
            self._q(f"PRAGMA wal_checkpoint({mode})")
            self._last_checkpoint = time.monotonic()

    def close(self) -> None:
        try:
            if self._db is not None:
                if not self.readonly:
                    try:
                        self.checkpoint()
                    except AttnumEnvironmentError:
                        pass  # the rows are committed in -wal; the next open folds them in
                self._db.close()
        finally:
            self._db = None
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- spec binding -----------------------------------------------------------------------
    def holds_spec(self, *, name: str, spec_hash: str, source: str) -> bool:
        """Whether the folder already holds this spec (False: none yet); an AttnumEnvironmentError when it holds
        another one. Reads only (a read-only store too: a command checks before work it would lose)."""
        held = self.meta()
        if "spec_hash" not in held:
            return False
        if held["spec_hash"] != spec_hash:
            raise AttnumEnvironmentError(
                f"{self.folder}: out holds results of a different spec "
                f"({held.get('spec_name')!r}, hash {held['spec_hash']}) than {source} "
                f"({name!r}, hash {spec_hash}); expected an empty folder or one made by this spec"
            )
        return True

    def bind_spec(self, *, name: str, spec_hash: str, canonical: dict[str, Any], source: str) -> None:
        """Claim an empty folder for a spec, or check that it already holds that same spec."""
        if self.holds_spec(name=name, spec_hash=spec_hash, source=source):
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

    # ---- planning and runs ------------------------------------------------------------------
    def plan(self, planned: Iterable[tuple[str, str, tuple[str, ...], dict[str, Any]]]) -> None:
        """Record (key, kind, groups, config) of every point the spec asks for (idempotent)."""
        rows = [(k, kind, json.dumps(list(g)), json.dumps(c, sort_keys=True)) for k, kind, g, c in planned]
        with self._tx():
            self._db.executemany("INSERT OR IGNORE INTO planned VALUES (?, ?, ?, ?)", rows)

    def done_keys(self) -> set[str]:
        """Keys that need no rerun: points done. Failed points are retried on resume."""
        return {k for (k,) in self._q("SELECT key FROM points WHERE status = 'done'")}

    def begin_run(self, *, command: str, n_todo: int, executor: str, jobs: int) -> int:
        me = this_process()
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO runs (command, started_at, status, n_todo, executor, jobs, pid, host, proc_start) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (command, time.time(), "running", n_todo, executor, jobs, me["pid"], me["host"], me["proc_start"]),
            )
        return int(cur.lastrowid)

    def end_run(self, run_id: int, status: str) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE run_id = ?", (time.time(), status, run_id)
            )
        self.checkpoint()

    def _mark_killed_runs(self) -> None:
        """We hold the folder's lock, so no other run is writing: every ``running`` run has died."""
        with self._tx():
            self._db.execute(
                "UPDATE runs SET status = 'killed', finished_at = (SELECT MAX(written_at) FROM points "
                "WHERE points.run_id = runs.run_id) WHERE status = 'running'")

    # ---- results ----------------------------------------------------------------------------
    def write(self, result: dict[str, Any], run_id: int) -> bool:
        """Commit one point's result; False when a done row already holds it (never replaced, by a
        failed result nor by another done one). A retried failed point replaces its row."""
        env = result.get("env") or {}
        env_json = json.dumps(env, sort_keys=True)
        env_id = hashlib.sha256(env_json.encode()).hexdigest()[:16]
        with self._tx():
            if env_id not in self._envs:
                self._db.execute("INSERT OR IGNORE INTO environments VALUES (?, ?)", (env_id, env_json))
            cur = self._db.execute(
                "INSERT INTO points VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                "status=excluded.status, metrics=excluded.metrics, error=excluded.error, "
                "run_id=excluded.run_id, env_id=excluded.env_id, started_at=excluded.started_at, "
                "wall_s=excluded.wall_s, worker=excluded.worker, written_at=excluded.written_at "
                "WHERE points.status != 'done'",
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
        self._envs.add(env_id)  # only once committed: a rolled-back insert must be made again
        if time.monotonic() - self._last_checkpoint > CHECKPOINT_EVERY_S:
            self.checkpoint("PASSIVE")  # never waits for readers; bounds what a copy of the main file misses
        return cur.rowcount > 0

    def _tx(self):
        return _Transaction(self)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT: one writer, and a point is either fully in the file or absent.

    Ctrl-C raises KeyboardInterrupt between any two bytecodes, also between BEGIN and the ``with``
    body, where no ``__exit__`` runs and the transaction stays open. Such a transaction holds nothing
    committed; the next one rolls it back before it begins (a sweep's ``end_run`` after Ctrl-C is one).
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def __enter__(self) -> None:
        db = self._store._db
        if db.in_transaction:  # left open by an interrupt: nothing in it was committed
            self._store._q("ROLLBACK")
        try:
            self._store._q("BEGIN IMMEDIATE")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def __exit__(self, exc_type, exc, tb) -> bool:
        db = self._store._db
        if exc_type is None:
            self._store._q("COMMIT")
            return False
        if db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        if isinstance(exc, sqlite3.Error) and not isinstance(exc, (sqlite3.ProgrammingError, sqlite3.IntegrityError)):
            raise self._store._environment_error(exc) from None
        return False


def open_store(out_dir: str | Path) -> Store:
    """Open an existing folder's store for reading (runs, export, report): read-only, no writes."""
    return Store(out_dir, readonly=True)
