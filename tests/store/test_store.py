"""The SQLite results store: one row per point, resume semantics, runs, spec binding, WAL."""

from __future__ import annotations

import sqlite3

import pytest

from attnum.errors import AttnumInputError
from attnum.store.db import DB_NAME, Store, open_store


def _result(key, status="done", value=1.0, error=None):
    return {"key": key, "status": status, "metrics": {"m": {"max_abs": value}} if status == "done" else None,
            "error": error, "started_at": 1.0, "wall_s": 0.5, "env": {"torch": "x", "device": "cpu"}, "worker": "w:1"}


def _store(tmp_path, keys=("a", "b", "c")):
    store = Store(tmp_path)
    store.bind_spec(name="s", spec_hash="h1", canonical={"name": "s"}, source="spec.toml")
    store.plan((k, "compare", ("g",), {"seed": i}) for i, k in enumerate(keys))
    return store


def test_roundtrip_counts_and_wal(tmp_path):
    with _store(tmp_path) as store:
        run = store.begin_run(command="t", n_todo=3, executor="local", jobs=1)
        store.write(_result("a", value=0.25), run)
        store.write(_result("b", status="failed", error="ValueError: boom"), run)
        store.end_run(run, "complete-with-failures")
        assert store.counts() == {"planned": 3, "done": 1, "failed": 1, "missing": 1}
        rows = {r["key"]: r for r in store.rows(status=None)}
        assert rows["a"]["metrics"] == {"m": {"max_abs": 0.25}} and rows["a"]["config"] == {"seed": 0}
        assert rows["b"]["error"] == "ValueError: boom" and rows["c"]["status"] == "missing"
        assert store.done_keys() == {"a"}
        (r,) = store.runs()
        assert (r["done"], r["failed"], r["status"]) == (1, 1, "complete-with-failures")
        assert list(store.environments().values()) == [{"device": "cpu", "torch": "x"}]
    mode = sqlite3.connect(tmp_path / DB_NAME).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_retry_replaces_failed_row_never_duplicates(tmp_path):
    with _store(tmp_path) as store:
        run1 = store.begin_run(command="t", n_todo=3, executor="local", jobs=1)
        store.write(_result("a", status="failed", error="x"), run1)
        store.write(_result("a", status="failed", error="y"), run1)
        run2 = store.begin_run(command="t", n_todo=3, executor="local", jobs=1)
        assert store.write(_result("a", value=2.0), run2)  # a failed row's retry replaces it
        assert not store.write(_result("a", value=3.0), run2)  # a done row is final: the first one stays
        n = store._db.execute("SELECT COUNT(*) FROM points WHERE key = 'a'").fetchone()[0]
        assert n == 1
        (row,) = store.rows(status="done")
        assert row["metrics"]["m"]["max_abs"] == 2.0 and row["run_id"] == run2


def test_a_failed_result_never_replaces_a_done_row(tmp_path):
    # The issue: a failed point overwrote a finished one (8 done rows lost).
    with _store(tmp_path) as store:
        run = store.begin_run(command="t", n_todo=3, executor="local", jobs=1)
        for k in ("a", "b", "c"):
            store.write(_result(k, value=0.5), run)
        for k in ("a", "b", "c"):
            assert not store.write(_result(k, status="failed", error="worker died"), run)
        assert store.counts() == {"planned": 3, "done": 3, "failed": 0, "missing": 0}
        assert [r["metrics"]["m"]["max_abs"] for r in store.rows()] == [0.5, 0.5, 0.5]


def test_each_write_is_visible_to_another_connection_at_once(tmp_path):
    with _store(tmp_path) as store:
        run = store.begin_run(command="t", n_todo=3, executor="local", jobs=1)
        store.write(_result("a"), run)
        # A reader (another process in real life) sees the committed point while the writer is open.
        other = sqlite3.connect(tmp_path / DB_NAME)
        assert other.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 1


def test_store_argument_must_be_a_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(AttnumInputError, match=r"f.* is not allowed; expected a folder, not an existing file"):
        Store(tmp_path / "f")
    with pytest.raises(AttnumInputError, match=r"x.sqlite.* is not allowed; expected a folder"):
        Store(tmp_path / "x.sqlite")
    assert not (tmp_path / "x.sqlite").exists()


def test_bind_other_spec_refused_same_spec_accepted(tmp_path):
    _store(tmp_path).close()
    with Store(tmp_path) as store:
        store.bind_spec(name="s", spec_hash="h1", canonical={"name": "s"}, source="spec.toml")
        with pytest.raises(AttnumInputError, match="different spec"):
            store.bind_spec(name="t", spec_hash="h2", canonical={"name": "t"}, source="t.toml")


def test_open_store_missing_folder(tmp_path):
    with pytest.raises(AttnumInputError, match=r"out=.*nothing.* is not allowed; expected a folder holding attnum.sqlite"):
        open_store(tmp_path / "nothing")
