"""The store's schema: its tables, its version, the migration of older stores and the refusal of newer ones.

``meta.schema`` holds the version a store was created with. A store whose version is newer than
:data:`SCHEMA_VERSION` was written by a newer attnum, whose rows this code may misread or (resuming)
corrupt: it is refused, read or write, in one line naming both versions. Older stores are migrated
on open for writing (:func:`create_or_migrate`) and read as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnum.errors import AttnumEnvironmentError

DB_NAME = "attnum.sqlite"
SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS planned (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, groups TEXT NOT NULL, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT, command TEXT, started_at REAL NOT NULL,
    finished_at REAL, status TEXT NOT NULL, n_todo INTEGER, executor TEXT, jobs INTEGER,
    pid INTEGER, host TEXT, proc_start TEXT);
CREATE TABLE IF NOT EXISTS environments (env_id TEXT PRIMARY KEY, env TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS points (
    key TEXT PRIMARY KEY REFERENCES planned(key), status TEXT NOT NULL, metrics TEXT, error TEXT,
    run_id INTEGER REFERENCES runs(run_id), env_id TEXT REFERENCES environments(env_id),
    started_at REAL, wall_s REAL, worker TEXT, written_at REAL NOT NULL);
"""
RUN_PROCESS_COLUMNS = ("pid", "host", "proc_start")  # added after schema 1 shipped: old stores lack them


def check_version(held: str | None, path: Path) -> None:
    """Refuse a store of a newer (or unreadable) schema version; None (no spec bound yet) is fine."""
    if held is None:
        return
    try:
        newer = int(held) > int(SCHEMA_VERSION)
    except (TypeError, ValueError):
        raise AttnumEnvironmentError(
            f"{path}: the results store's schema version is {str(held)[:40]!r}, not a number; this attnum "
            f"reads schema version {SCHEMA_VERSION}: move the store aside or restore a copy of it") from None
    if newer:
        raise AttnumEnvironmentError(
            f"{path}: the results store has schema version {held}, newer than this attnum's ({SCHEMA_VERSION}); "
            "it was written by a newer attnum: upgrade attnum to read or resume it (nothing was changed)")


def create_or_migrate(q: Callable, executescript: Callable) -> None:
    """Create the tables of an empty store, or add the columns an older one lacks."""
    executescript(_SCHEMA)
    have = {row[1] for row in q("PRAGMA table_info(runs)")}
    for col, typ in zip(RUN_PROCESS_COLUMNS, ("INTEGER", "TEXT", "TEXT")):
        if col not in have:
            q(f"ALTER TABLE runs ADD COLUMN {col} {typ}")
