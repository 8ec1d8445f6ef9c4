"""Reading a results store: the spec it holds, its rows, environments, counts and runs.

Every row is checked for its shape as it is read: a field whose JSON does not parse, or parses to
the wrong kind (``config = '[]'``, ``metrics = '"x"'``, a group that is not a string, a number stored as
text), is reported in one line on stderr (``attnum: warning: FILE: row N (key K): field F ...; row
skipped``) and left out, so read-only commands (runs, export, report) finish on what remains instead
of ending in a traceback. The rows skipped are kept in ``skipped`` for a caller to show.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnum.sandbox.processes import is_running
from attnum.store.file import environment_error, guard
from attnum.store.schema import RUN_PROCESS_COLUMNS

_NUMBER = (int, float)


class BadRow(ValueError):
    """A field of the wrong shape: (field, what it is, what was expected)."""


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number" if isinstance(v, _NUMBER) else type(v).__name__)


def _metrics_ok(node: Any, depth: int = 0) -> bool:
    """Nested objects whose leaves are numbers, null, booleans or short labels (a metric that reads as a
    number must be one: a string leaf is only allowed where no number is ever stored)."""
    if depth > 8:
        return False
    if isinstance(node, dict):
        return all(isinstance(k, str) and _metrics_ok(v, depth + 1) for k, v in node.items())
    if isinstance(node, list):
        return all(_metrics_ok(v, depth + 1) for v in node)
    return node is None or isinstance(node, (bool, int, float, str))


class StoreReader:
    """The read half of :class:`attnum.store.db.Store` (it holds ``path``, ``_db`` and ``_has_process_cols``)."""

    path: Path
    _db: sqlite3.Connection | None
    _has_process_cols: bool

    def _q(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        """Run one statement and fetch every row (a corrupt page surfaces here, not in a caller's loop)."""
        return guard(self.path, lambda: self._db.execute(sql, tuple(args)).fetchall())

    def _environment_error(self, err: sqlite3.Error):
        return environment_error(self.path, err)

    def _has_table(self, name: str) -> bool:
        return bool(self._q("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def _parse(self, text: Any, field: str, expect: tuple[type, ...], *, none_ok: bool) -> Any:
        if text is None or text == "":
            if none_ok:
                return None
            raise BadRow(f"field {field} is empty")
        if not isinstance(text, str):
            raise BadRow(f"field {field} is {_kind(text)}, not JSON text")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as err:
            raise BadRow(f"field {field} is not JSON ({str(err)[:60]})") from None
        if value is None and none_ok:
            return None
        if not isinstance(value, expect) or isinstance(value, bool):
            raise BadRow(f"field {field} is {_kind(value)}, expected {' or '.join(_kind(t()) for t in expect)}")
        return value

    def _skip(self, rowid: Any, key: Any, why: str) -> None:
        self.skipped = [*getattr(self, "skipped", []), (rowid, key, why)]
        print(f"attnum: warning: {self.path}: row {rowid} (key {str(key)[:80]!r}): {why}; row skipped",
              file=sys.stderr)

    # ---- the spec -----------------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return dict(self._q("SELECT key, value FROM meta")) if self._has_table("meta") else {}

    def spec(self) -> dict[str, Any] | None:
        try:
            return self._parse(self.meta().get("spec_json"), "spec_json", (dict,), none_ok=True)
        except BadRow as err:
            self._skip("meta", "spec_json", str(err))
            return None

    # ---- rows ---------------------------------------------------------------------------------
    def rows(self, *, kind: str | None = None, status: str | None = "done") -> list[dict[str, Any]]:
        """Planned points joined with their results; ``status=None`` includes missing ones. Rows of
        the wrong shape are reported and skipped (module doc)."""
        if not self._has_table("points"):
            return []
        sql = ("SELECT p.rowid, p.key, p.kind, p.groups, p.config, r.status, r.metrics, r.error, r.run_id, "
               "r.env_id, r.started_at, r.wall_s, r.worker FROM planned p LEFT JOIN points r ON r.key = p.key")
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
        for rowid, key, kind_, groups, config, st, metrics, error, run_id, env_id, started, wall, worker in (
            self._q(sql + " ORDER BY p.rowid", args)
        ):
            try:
                out.append(self._row(key, kind_, groups, config, st, metrics, error, run_id, env_id, started,
                                     wall, worker))
            except BadRow as err:
                self._skip(rowid, key, str(err))
        return out

    def _row(self, key, kind, groups, config, st, metrics, error, run_id, env_id, started, wall, worker) -> dict:
        for field, v, types in (("key", key, (str,)), ("kind", kind, (str,)), ("status", st, (str,)),
                                ("error", error, (str,)), ("run_id", run_id, (int,)), ("env_id", env_id, (str,)),
                                ("started_at", started, _NUMBER), ("wall_s", wall, _NUMBER),
                                ("worker", worker, (str,))):
            if v is not None and (not isinstance(v, types) or isinstance(v, bool)):
                raise BadRow(f"field {field} is {_kind(v)}, expected {_kind(types[0]())}")
        groups_ = self._parse(groups, "groups", (list,), none_ok=False)
        if not all(isinstance(g, str) for g in groups_):
            raise BadRow("field groups holds a non-string")
        metrics_ = self._parse(metrics, "metrics", (dict,), none_ok=True)
        if metrics_ is not None and not _metrics_ok(metrics_):
            raise BadRow("field metrics holds a value that is not a number, label or object")
        return {"key": key, "kind": kind, "groups": groups_,
                "config": self._parse(config, "config", (dict,), none_ok=False), "status": st or "missing",
                "metrics": metrics_, "error": error, "run_id": run_id, "env_id": env_id, "started_at": started,
                "wall_s": wall, "worker": worker}

    def environments(self) -> dict[str, dict[str, Any]]:
        if not self._has_table("environments"):
            return {}
        out = {}
        for k, v in self._q("SELECT env_id, env FROM environments"):
            try:
                out[k] = self._parse(v, "env", (dict,), none_ok=False)
            except BadRow as err:
                self._skip("environments", k, str(err))
        return out

    def counts(self) -> dict[str, int]:
        """Planned, done, failed and missing point counts."""
        if not self._has_table("points"):
            return {"planned": 0, "done": 0, "failed": 0, "missing": 0}
        planned = self._q("SELECT COUNT(*) FROM planned")[0][0]
        by = dict(self._q("SELECT status, COUNT(*) FROM points GROUP BY status"))
        done, failed = by.get("done", 0), by.get("failed", 0)
        return {"planned": planned, "done": done, "failed": failed, "missing": planned - done - failed}

    def runs(self) -> list[dict[str, Any]]:
        """Each run with how many points it wrote (done / failed). A ``running`` run whose process is
        gone (on this host) reads ``killed``: computed here, without writing the store."""
        if not self._has_table("runs"):
            return []
        written = {(rid, st): n for rid, st, n in self._q(
            "SELECT run_id, status, COUNT(*) FROM points GROUP BY run_id, status")}
        cols = ["run_id", "command", "started_at", "finished_at", "status", "n_todo", "executor", "jobs"]
        if self._has_process_cols:
            cols += RUN_PROCESS_COLUMNS
        out = []
        for row in self._q(f"SELECT {', '.join(cols)} FROM runs ORDER BY run_id"):
            rec = dict.fromkeys(RUN_PROCESS_COLUMNS) | dict(zip(cols, row))
            bad = next((f for f in ("started_at", "finished_at") if rec[f] is not None
                        and (not isinstance(rec[f], _NUMBER) or isinstance(rec[f], bool))), None)
            if bad:
                self._skip(f"runs {rec['run_id']}", rec.get("command"), f"field {bad} is {_kind(rec[bad])}, "
                           "expected a number")
                continue
            if rec["status"] == "running" and is_running(rec["pid"], rec["host"], rec["proc_start"]) is False:
                rec["status"] = "killed"
            rec["done"] = written.get((rec["run_id"], "done"), 0)
            rec["failed"] = written.get((rec["run_id"], "failed"), 0)
            out.append(rec)
        return out
