"""The store under real use (issue 13): one writer per folder, killed runs, WAL checkpoints, read-only
readers, foreign / corrupt / read-only / full stores, and ``--out`` that must be a folder.

Every failure here must be one line on stderr naming the file and what to do, with exit status 2.
As root, a read-only or full disk cannot be made with chmod: the SQLite errors are injected instead.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import _paths
import pytest
from _sweep_helpers import PACKAGE_ROOT, cli, write_spec

import attnum.store.db as store_mod
from attnum.errors import AttnumEnvironmentError, AttnumInputError
from attnum.sandbox.processes import start_time, this_process
from attnum.store.db import DB_NAME, Store, open_store
from attnum.store.lock import LOCK_NAME

SMALL_SPEC = """
name = "small"
[defaults]
heads = 1
head_dim = 16
block_q = 16
block_k = 16
[axes]
format = ["e5m4"]
policy = ["uniform", "fa2"]
seq_len = [32]
seed = [0, 1]
"""
SMALL_POINTS = 4


def _fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def _result(key, status="done", value=1.0):
    return {"key": key, "status": status, "metrics": {"m": {"max_abs": value}} if status == "done" else None,
            "error": None if status == "done" else "boom", "started_at": 1.0, "wall_s": 0.5,
            "env": {"torch": "x"}, "worker": "w:1"}


def _bound(folder: Path, keys=("a", "b", "c")) -> Store:
    store = Store(folder)
    store.bind_spec(name="s", spec_hash="h1", canonical={"name": "s"}, source="spec.toml")
    store.plan((k, "compare", ("g",), {"seed": i}) for i, k in enumerate(keys))
    return store


def _one_error_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("attnum:")]  # a sweep's progress may precede it
    assert len(lines) == 1 and lines[0].startswith("attnum: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> Path:
    """A real (tiny) sweep's folder, to copy."""
    tmp = tmp_path_factory.mktemp("small")
    assert cli("sweep", write_spec(tmp, SMALL_SPEC), "--out", tmp / "out", "--quiet") == 0
    return tmp / "out"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=_paths.HANG_S)


# ---- 1. one writer per folder -------------------------------------------------------------------


def test_second_writer_refused_in_one_line_naming_the_first(tmp_path):
    with Store(tmp_path, command="attnum sweep first.toml"):
        with pytest.raises(AttnumEnvironmentError) as err:
            Store(tmp_path)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"pid {os.getpid()} on {socket.gethostname()}" in msg and "'attnum sweep first.toml'" in msg
    assert "since 20" in msg and "UTC" in msg
    Store(tmp_path).close()  # released on close


def test_lock_of_a_killed_process_is_taken_over(tmp_path):
    proc = _python(f"""
        import os, signal
        from attnum.store.db import Store
        s = Store({str(tmp_path)!r}, command="attnum sweep killed.toml")
        print(os.getpid(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert proc.returncode == -9, proc.stderr
    dead = int(proc.stdout)
    assert f'"pid": {dead}' in (tmp_path / LOCK_NAME).read_text()  # the stale lock is still on disk
    with Store(tmp_path):  # ... and taken over
        assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_NAME).read_text()


def test_without_flock_the_recorded_pid_decides(tmp_path, monkeypatch):
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    me = this_process()
    lock = tmp_path / LOCK_NAME
    lock.write_text(f'{{"pid": {me["pid"]}, "host": "{me["host"]}", "proc_start": "{me["proc_start"]}", '
                    '"command": "attnum sweep alive.toml", "since": 0}')
    with pytest.raises(AttnumEnvironmentError, match="in use by 'attnum sweep alive.toml'"):
        Store(tmp_path)
    # The same pid with another start time is a reused pid: the holder is gone.
    lock.write_text(f'{{"pid": {me["pid"]}, "host": "{me["host"]}", "proc_start": "other:1", "command": "x"}}')
    Store(tmp_path).close()


# ---- 4. a run whose process is gone reads "killed" ----------------------------------------------


def test_killed_run_reads_killed_and_its_rows_survive_in_the_wal(tmp_path):
    _bound(tmp_path).close()
    proc = _python(f"""
        import os, signal
        from attnum.store.db import Store
        s = Store({str(tmp_path)!r})
        run = s.begin_run(command="attnum sweep k.toml", n_todo=3, executor="local", jobs=2)
        for k in ("a", "b"):
            s.write({{"key": k, "status": "done", "metrics": {{"m": 1}}, "env": {{}}}}, run)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert proc.returncode == -9, proc.stderr
    db = tmp_path / DB_NAME
    assert (tmp_path / (DB_NAME + "-wal")).stat().st_size > 0
    alone = tmp_path / "copy"
    alone.mkdir()
    shutil.copy(db, alone / DB_NAME)  # the main file alone: the killed run's rows are only in -wal
    assert sqlite3.connect(alone / DB_NAME).execute("SELECT COUNT(*) FROM points").fetchone()[0] == 0

    before = _fingerprint(db)
    with open_store(tmp_path) as store:  # a reader sees them, computes "killed", and writes nothing
        (run,) = store.runs()
        assert (run["status"], run["done"], run["pid"]) == ("killed", 2, run["pid"])
        assert store.counts()["done"] == 2
    assert _fingerprint(db) == before

    with Store(tmp_path):  # the next writer folds the WAL in and records the verdict
        pass
    shutil.copy(db, alone / DB_NAME)
    con = sqlite3.connect(alone / DB_NAME)
    assert con.execute("SELECT COUNT(*) FROM points").fetchone()[0] == 2
    assert con.execute("SELECT status FROM runs").fetchall() == [("killed",)]


def test_running_run_is_killed_only_when_its_process_is_gone(tmp_path):
    with _bound(tmp_path) as store:
        store.begin_run(command="c", n_todo=1, executor="local", jobs=1)
        assert [r["status"] for r in store.runs()] == ["running"]  # this process: alive
        me = this_process()
        store._q("UPDATE runs SET proc_start = ?", ("reused:1",))  # same pid, another process: pid reuse
        assert [r["status"] for r in store.runs()] == ["killed"]
        store._q("UPDATE runs SET proc_start = ?, host = ?", (me["proc_start"], "elsewhere"))
        assert [r["status"] for r in store.runs()] == ["running"]  # another host: cannot tell, so not "killed"
    assert start_time(os.getpid()) == me["proc_start"]


def test_old_store_without_process_columns_reads_and_migrates(tmp_path):
    con = sqlite3.connect(tmp_path / DB_NAME)
    con.executescript(store_mod._SCHEMA.replace(",\n    pid INTEGER, host TEXT, proc_start TEXT", ""))
    con.execute("INSERT INTO runs (command, started_at, status) VALUES ('old', 1.0, 'complete')")
    con.commit()
    con.close()
    with open_store(tmp_path) as store:
        assert [(r["status"], r["pid"]) for r in store.runs()] == [("complete", None)]
    with Store(tmp_path) as store:
        store.begin_run(command="new", n_todo=0, executor="local", jobs=1)
        assert [r["pid"] for r in store.runs()] == [None, os.getpid()]


# ---- Ctrl-C inside a transaction ----------------------------------------------------------------


class _InterruptOn:
    """The store's connection, raising KeyboardInterrupt (Ctrl-C) right after the first statement
    that starts with ``prefix`` has run, as a signal handler may between any two bytecodes."""

    def __init__(self, db, prefix):
        self._db, self._prefix, self.fired = db, prefix, False

    def execute(self, sql, *args):
        cur = self._db.execute(sql, *args)
        if not self.fired and sql.startswith(self._prefix):
            self.fired = True
            raise KeyboardInterrupt("SIGINT")
        return cur

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_transaction_left_open_by_ctrl_c_is_rolled_back_by_the_next(tmp_path):
    """The CI failure of a --jobs 2 sweep: Ctrl-C between BEGIN and the ``with`` body left a transaction
    open, and recording the run as interrupted failed with "cannot start a transaction within a
    transaction" (exit 2, store called corrupt)."""
    with _bound(tmp_path) as store:
        run = store.begin_run(command="c", n_todo=3, executor="local", jobs=2)
        store.write(_result("a"), run)
        store._db.execute("BEGIN IMMEDIATE")  # what the interrupted __enter__ leaves behind
        store._db.execute("INSERT INTO environments VALUES ('half', '{}')")
        store.end_run(run, "interrupted")
        assert [r["status"] for r in store.runs()] == ["interrupted"]
        assert store.counts()["done"] == 1
        assert store._q("SELECT COUNT(*) FROM environments WHERE env_id = 'half'") == [(0,)]


def _write_interrupted(store, run, prefix):
    """``store.write`` of point "a" with Ctrl-C right after its first statement starting with ``prefix``."""
    real = store._db
    store._db = _InterruptOn(real, prefix)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.write(_result("a"), run)
    finally:
        store._db = real


def test_ctrl_c_right_after_begin_leaves_no_transaction_open(tmp_path):
    with _bound(tmp_path) as store:
        run = store.begin_run(command="c", n_todo=3, executor="local", jobs=1)
        _write_interrupted(store, run, "BEGIN")
        assert not store._db.in_transaction
        store.write(_result("b"), run)
        store.end_run(run, "interrupted")
        assert store.counts()["done"] == 1


def test_environment_of_a_rolled_back_write_is_written_with_the_next_point(tmp_path):
    """A write interrupted after its environment row went in is rolled back whole; the next point of
    the same environment must insert the row again, or it would name an environment the store lacks."""
    with _bound(tmp_path) as store:
        run = store.begin_run(command="c", n_todo=3, executor="local", jobs=1)
        _write_interrupted(store, run, "INSERT INTO points")
        store.write(_result("b"), run)
        store.end_run(run, "interrupted")
        orphans = store._q("SELECT key FROM points WHERE env_id NOT IN (SELECT env_id FROM environments)")
        assert store.counts()["done"] == 1 and orphans == []


# ---- 3. checkpoints ------------------------------------------------------------------------------


def test_end_of_run_checkpoints_so_the_main_file_alone_has_every_row(tmp_path):
    with _bound(tmp_path) as store:
        run = store.begin_run(command="c", n_todo=3, executor="local", jobs=1)
        for k in ("a", "b", "c"):
            store.write(_result(k), run)
        store.end_run(run, "complete")
        # The writer is still open (as between a sweep's end and its report): copy the main file alone.
        shutil.copy(tmp_path / DB_NAME, tmp_path / "alone.sqlite")
    con = sqlite3.connect(tmp_path / "alone.sqlite")
    assert con.execute("SELECT COUNT(*) FROM points WHERE status = 'done'").fetchone()[0] == 3
    assert con.execute("SELECT status FROM runs").fetchall() == [("complete",)]


def test_periodic_checkpoint_while_running(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "CHECKPOINT_EVERY_S", 0.0)
    with _bound(tmp_path) as store:
        run = store.begin_run(command="c", n_todo=3, executor="local", jobs=1)
        store.write(_result("a"), run)
        shutil.copy(tmp_path / DB_NAME, tmp_path / "alone.sqlite")
    assert sqlite3.connect(tmp_path / "alone.sqlite").execute("SELECT COUNT(*) FROM points").fetchone()[0] == 1


# ---- 7. read-only commands ----------------------------------------------------------------------


def test_runs_export_report_leave_the_store_untouched(small_store, tmp_path, capsys):
    out = _copy(small_store, tmp_path / "out")
    # A killed writer's leftovers: a run row that lives only in -wal (the case where a reader's
    # checkpoint-on-close used to rewrite the main file).
    proc = _python(f"""
        import os, signal, sqlite3
        con = sqlite3.connect({str(out / DB_NAME)!r}, isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("INSERT INTO runs (command, started_at, status) VALUES ('ghost', 1.0, 'running')")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert proc.returncode == -9, proc.stderr
    db = out / DB_NAME
    before = _fingerprint(db)
    assert cli("runs", out) == 0
    assert "ghost" in capsys.readouterr().out
    assert cli("export", out, "-o", tmp_path) == 0  # -o naming a folder: points.csv inside it
    assert (tmp_path / "points.csv").read_text().count("\n") == SMALL_POINTS + 1
    assert cli("report", out) == 0
    assert _fingerprint(db) == before
    assert not (out / LOCK_NAME).exists()  # nobody took the writer's lock (a released lock is removed)


def test_reader_falls_back_to_immutable_on_a_read_only_medium(small_store, tmp_path, monkeypatch):
    out = _copy(small_store, tmp_path / "out")
    real = sqlite3.connect

    class CannotOpen:  # what SQLite says when the -shm file of a WAL database cannot be created
        def execute(self, *a, **k):
            raise sqlite3.OperationalError("unable to open database file")

        def close(self):
            pass

    def connect(target, *args, **kwargs):
        if "mode=ro" in str(target) and "immutable=1" not in str(target):
            return CannotOpen()
        return real(target, *args, **kwargs)

    monkeypatch.setattr(store_mod.sqlite3, "connect", connect)
    with open_store(out) as store:
        assert store.counts()["done"] == SMALL_POINTS


# ---- 6. --out must be a folder; another program's SQLite file is never touched -------------------


@pytest.mark.parametrize("argv", [
    ["sweep", "{spec}", "--out", "{out}"],
    ["reproduce", "--profile", "smoke", "--out", "{out}"],
    ["diverge", "--out", "{out}"],
    ["diverge", "--checkpoints", "{tmp}", "{tmp}", "--out", "{out}"],
    ["spec", "--out", "{out}"],
    ["ring", "--out", "{out}"],
], ids=lambda a: "-".join(a[:2]).replace("{", "").replace("}", ""))
@pytest.mark.parametrize("what", ["existing-file", "x.sqlite"])
def test_out_must_be_a_folder(argv, what, tmp_path, capsys):
    spec = write_spec(tmp_path, SMALL_SPEC)
    out = tmp_path / ("f.txt" if what == "existing-file" else "x.sqlite")
    if what == "existing-file":
        out.write_text("not a folder")
    before = sorted(p.name for p in tmp_path.iterdir())
    args = [a.format(spec=spec, out=out, tmp=tmp_path) for a in argv]
    assert cli(*args) == 2
    _one_error_line(capsys, f"--out='{out}'", "a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_foreign_sqlite_file_is_never_touched(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    con = sqlite3.connect(out / DB_NAME)
    con.execute("CREATE TABLE cookies (name TEXT, value TEXT)")
    con.execute("INSERT INTO cookies VALUES ('session', 'x')")
    con.commit()
    con.close()
    before = _fingerprint(out / DB_NAME)
    for argv in (["sweep", write_spec(tmp_path, SMALL_SPEC), "--out", out], ["runs", out], ["export", out]):
        assert cli(*argv) == 2
        _one_error_line(capsys, str(out / DB_NAME), "not an attnum results store", "cookies")
    assert _fingerprint(out / DB_NAME) == before
    assert sorted(p.name for p in out.iterdir()) == [DB_NAME]  # no lock file, no -wal, no schema


# ---- 8. corrupt, read-only, full --------------------------------------------------------------------


def _corrupt(kind: str, src: Path, dst: Path) -> Path:
    dst.mkdir()
    data = (src / DB_NAME).read_bytes()
    if kind == "garbage":
        (dst / DB_NAME).write_bytes(bytes(range(256)) * 40)
    elif kind == "truncated":
        (dst / DB_NAME).write_bytes(data[:8192])
    elif kind == "empty":
        (dst / DB_NAME).write_bytes(b"")
    elif kind == "bad-row":
        (dst / DB_NAME).write_bytes(data)
        con = sqlite3.connect(dst / DB_NAME)
        con.execute("UPDATE points SET metrics = '{\"flash_vs_golden\": ' WHERE rowid = 2")
        con.commit()
        con.close()
    return dst


@pytest.mark.parametrize("command", ["runs", "export", "report", "sweep", "reproduce"])
@pytest.mark.parametrize("kind", ["garbage", "truncated", "empty", "bad-row"])
def test_corrupt_store_is_one_line_naming_the_file(kind, command, small_store, tmp_path, capsys):
    if kind == "bad-row" and command in ("sweep", "reproduce", "runs"):
        pytest.skip("reads no point's metrics, config or environment: nothing corrupt to meet")
    if kind == "empty" and command in ("sweep", "reproduce"):
        pytest.skip("an empty attnum.sqlite is a new store to a sweep")
    out = _corrupt(kind, small_store, tmp_path / "out")
    argv = {"sweep": ["sweep", write_spec(tmp_path, SMALL_SPEC), "--out", out, "--quiet"],
            "reproduce": ["reproduce", "--profile", "smoke", "--out", out, "--jobs", "1", "--quiet"],
            }.get(command, [command, out])
    if kind == "bad-row":  # a row that does not parse: reported (file, row, field) and skipped, never a traceback
        assert cli(*argv) == 0
        err = capsys.readouterr().err
        (line,) = [ln for ln in err.splitlines() if ln.startswith("attnum:")]
        assert line.startswith(f"attnum: warning: {out / DB_NAME}: row 2 (key ") and "field metrics" in line, err
        return
    assert cli(*argv) == 2
    line = _one_error_line(capsys, str(out / DB_NAME))
    assert any(w in line for w in ("corrupt", "not a SQLite database", "empty")), line


class _Refusing:
    """A connection that refuses writes the way a read-only or full disk does."""

    def __init__(self, con: sqlite3.Connection, message: str, refuse) -> None:
        self._con, self._message, self._refuse = con, message, refuse

    def _check(self, sql: str) -> None:
        if self._refuse(sql.lstrip().upper()):
            raise sqlite3.OperationalError(self._message)

    def execute(self, sql, *args):
        self._check(sql)
        return self._con.execute(sql, *args)

    def executemany(self, sql, *args):
        self._check(sql)
        return self._con.executemany(sql, *args)

    def executescript(self, sql):
        self._check(sql)
        return self._con.executescript(sql)

    def __getattr__(self, name):
        return getattr(self._con, name)


@pytest.mark.parametrize("message, refuse, needle", [
    ("attempt to write a readonly database", lambda sql: not sql.startswith(("SELECT", "PRAGMA TABLE_INFO")),
     "read-only"),
    ("database or disk is full", lambda sql: sql.startswith("INSERT INTO POINTS"), "disk is full"),
], ids=["read-only", "full"])
def test_read_only_or_full_disk_is_one_line(message, refuse, needle, tmp_path, monkeypatch, capsys):
    real = sqlite3.connect

    def connect(target, *args, **kwargs):
        con = real(target, *args, **kwargs)
        return con if "mode=ro" in str(target) else _Refusing(con, message, refuse)

    monkeypatch.setattr(store_mod.sqlite3, "connect", connect)
    out = tmp_path / "out"
    assert cli("sweep", write_spec(tmp_path, SMALL_SPEC), "--out", out, "--quiet") == 2
    _one_error_line(capsys, str(out / DB_NAME), needle)


def test_out_folder_that_cannot_be_created_is_one_line(tmp_path, monkeypatch, capsys):
    def refuse(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    assert cli("sweep", write_spec(tmp_path, SMALL_SPEC), "--out", tmp_path / "new", "--quiet") == 2
    _one_error_line(capsys, str(tmp_path / "new"), "Read-only file system")


def test_readonly_store_refuses_missing_folder(tmp_path):
    with pytest.raises(AttnumInputError, match="expected a folder holding attnum.sqlite"):
        open_store(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()
