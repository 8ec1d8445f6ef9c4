"""The store's file, before and around SQLite: is it a SQLite file, is it attnum's, open it read-only,
and say in one line what a SQLite or disk failure means and what to do.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path

from attnum.errors import AttnumEnvironmentError

SQLITE_HEADER = b"SQLite format 3\x00"
ATTNUM_TABLES = {"meta", "planned", "runs", "environments", "points", "sqlite_sequence"}


def environment_error(path: Path, err: sqlite3.Error) -> AttnumEnvironmentError:
    """``PATH: SQLite's message; what it means and what to do`` (one line)."""
    msg = str(err)
    low = msg.lower()
    if "readonly" in low or "read-only" in low:
        todo = "the file or its filesystem is read-only: copy the folder somewhere writable, or use another --out"
    elif "full" in low:
        todo = "the disk is full: free space, then re-run to resume (committed points are kept)"
    elif "locked" in low or "busy" in low:
        todo = "another process holds the database: wait for it, or use another --out"
    elif "unable to open" in low:
        todo = "cannot open it: check that the folder exists and is readable and writable"
    else:
        todo = "the results store is corrupt: move it aside and re-run the sweep into this folder, or restore a copy of it"
    return AttnumEnvironmentError(f"{path}: {msg}; {todo}")


def guard(path: Path, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with SQLite's operational and database errors made one line."""
    try:
        return fn(*args, **kwargs)
    except (sqlite3.OperationalError, sqlite3.DatabaseError) as err:
        raise environment_error(path, err) from None


def check_header(path: Path, *, empty_ok: bool) -> None:
    """Refuse a file that is not a SQLite database (garbage, or empty unless ``empty_ok``)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except OSError as err:
        raise AttnumEnvironmentError(f"{path}: cannot read the results store ({err.strerror}); "
                                     "check its permissions") from None
    if not head and empty_ok:
        return
    if head != SQLITE_HEADER:
        what = "empty" if not head else "not a SQLite database (garbage bytes)"
        raise AttnumEnvironmentError(f"{path}: the results store is {what}; move it aside and re-run "
                                     "the sweep into this folder, or restore a copy of it")


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A ``mode=ro`` connection: it never writes the file (no schema, no checkpoint on close). On a
    read-only medium, where the ``-shm`` file of a WAL database cannot be created, ``immutable=1``."""
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    db = guard(path, sqlite3.connect, uri, uri=True, timeout=30, isolation_level=None)
    try:
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
    except sqlite3.OperationalError as err:
        db.close()
        if not any(m in str(err) for m in ("unable to open", "readonly", "read-only")):
            raise environment_error(path, err) from None
        # Nobody can be writing on a read-only medium, so reading it as immutable is safe.
        db = guard(path, sqlite3.connect, uri + "&immutable=1", uri=True, isolation_level=None)
        guard(path, lambda: db.execute("SELECT COUNT(*) FROM sqlite_master").fetchall())
    except sqlite3.DatabaseError as err:
        db.close()
        raise environment_error(path, err) from None
    return db


def check_attnum(db: sqlite3.Connection, path: Path) -> set[str]:
    """The file's tables; refuse (and so never touch) a SQLite file that another program made."""
    tables = {name for (name,) in guard(path, lambda: db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall())}
    if tables and ("meta" not in tables or tables - ATTNUM_TABLES):
        raise AttnumEnvironmentError(
            f"{path}: not an attnum results store (it has tables {', '.join(sorted(tables))}); attnum "
            "leaves it untouched: choose another folder")
    return tables
