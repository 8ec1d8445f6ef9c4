"""Killing a real sweep (issue 13): SIGKILL of the driver at seeded random moments with ``--jobs 2``,
two sweeps on one folder, SIGTERM. After each: no worker survives, the store opens, done rows are
intact, the run reads ``killed`` (or ``interrupted``), and a resumed sweep finishes with the right counts.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import signal
import sqlite3
import sys
import time
import types
from pathlib import Path

import _paths
import pytest
from _sweep_helpers import descendants, popen_cli, run_cli, write_spec

from attnum.store.db import DB_NAME, open_store

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the worker processes"),
]

# 40 points of a few tenths of a second each on 2 loaded cores: long enough to be killed mid-way.
KILL_SPEC = """
name = "kill"
record = ["flash_vs_golden", "baseline_vs_golden"]
[defaults]
heads = 1
head_dim = 32
block_q = 32
block_k = 32
[axes]
format = ["e6m5", "e5m7"]
policy = ["uniform"]
seq_len = [768, 1024]
seed = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
"""
N_POINTS = 40
# The same, 400 points: a first sweep that is still running when the second one starts (it is stopped).
LONG_SPEC = KILL_SPEC.replace("seed = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]", f"seed = {list(range(100))}")


def _rows(db: Path) -> dict[str, str]:
    """key -> metrics of the done rows, read the way a user would (read-only, WAL included)."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        return dict(con.execute("SELECT key, metrics FROM points WHERE status = 'done'"))
    except sqlite3.OperationalError:  # not created yet
        return {}


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(p)
    return alive


def _wait_until(cond, timeout: float, what: str):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what}")


def test_sigkill_at_random_moments_with_jobs2(tmp_path):
    spec, out = write_spec(tmp_path, KILL_SPEC), tmp_path / "out"
    db = out / DB_NAME
    rng = random.Random(13)
    kept: dict[str, str] = {}
    # Moments: while starting up (before any point is done), then after a random number of rows.
    moments = [("seconds", rng.uniform(0.3, 1.5)), ("rows", rng.randint(1, 6)), ("rows", rng.randint(8, 16))]
    for n_run, (kind, at) in enumerate(moments, start=1):
        proc = popen_cli("sweep", spec, "--out", out, "--quiet", "--jobs", "2")
        if kind == "seconds":
            time.sleep(at)
        else:
            def enough(proc=proc, n=len(kept) + at):
                return len(_rows(db)) >= n or proc.poll() is not None

            _wait_until(enough, _paths.PATIENCE_S, f"{at} new rows")
        assert proc.poll() is None, f"the sweep ended before kill {n_run}: {proc.stderr.read()}"
        below = descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=_paths.PATIENCE_S)
        proc.stderr.close()
        # No worker survives its driver (they used to linger for 46 minutes, ~250 MB each).
        try:
            _wait_until(lambda below=below: not _alive(below), _paths.PATIENCE_S, "the workers to exit")
        finally:
            for p in _alive(below):
                os.kill(p, signal.SIGKILL)
        if not db.exists():
            continue  # killed before the store was created
        with open_store(out) as store:
            runs, counts = store.runs(), store.counts()
        assert runs[-1]["status"] == "killed" and [r["status"] for r in runs] == ["killed"] * len(runs)
        rows = _rows(db)
        assert {k: rows[k] for k in kept} == kept, "a done row changed or vanished"
        assert counts["done"] == len(rows) < N_POINTS and counts["planned"] == N_POINTS
        kept = rows
    resumed = run_cli("sweep", spec, "--out", out, "--quiet", "--jobs", "2")
    assert f"{N_POINTS} points planned, {len(kept)} already done, {N_POINTS - len(kept)} run, 0 failed" in resumed.stdout
    with open_store(out) as store:
        assert store.counts() == {"planned": N_POINTS, "done": N_POINTS, "failed": 0, "missing": 0}
        statuses = [r["status"] for r in store.runs()]
    assert statuses[-1] == "complete" and set(statuses[:-1]) == {"killed"}
    assert {k: v for k, v in _rows(db).items() if k in kept} == kept
    # After a finished run the main file alone holds every row (the WAL was checkpointed).
    shutil.copy(db, tmp_path / "alone.sqlite")
    assert sqlite3.connect(tmp_path / "alone.sqlite").execute("SELECT COUNT(*) FROM points").fetchone()[0] == N_POINTS


def test_second_sweep_on_one_folder_is_refused_and_sigterm_ends_the_first_cleanly(tmp_path):
    spec, out = write_spec(tmp_path, LONG_SPEC), tmp_path / "out"
    first = popen_cli("sweep", spec, "--out", out, "--quiet")  # in-process points: the first row comes soonest
    _wait_until(lambda: _rows(out / DB_NAME) or first.poll() is not None, _paths.START_S, "a first row")
    assert first.poll() is None
    second = run_cli("sweep", spec, "--out", out, "--quiet", check=False)
    assert second.returncode == 2
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith("attnum: error: ") and f"(pid {first.pid} on " in line and "--out" in line
    below = descendants(first.pid)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=_paths.PATIENCE_S) == 130
    assert "Traceback" not in first.stderr.read()
    first.stderr.close()
    _wait_until(lambda: not _alive(below), _paths.PATIENCE_S, "the workers to exit")
    # Interrupted, not killed: the run says so, and the WAL was checkpointed on the way out.
    shutil.copy(out / DB_NAME, tmp_path / "alone.sqlite")
    alone = sqlite3.connect(tmp_path / "alone.sqlite")
    assert alone.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
    assert alone.execute("SELECT COUNT(*) FROM points").fetchone()[0] == len(_rows(out / DB_NAME)) > 0


def _fake_ray(calls: list[str], init=None, initialized: bool = False) -> types.SimpleNamespace:
    """A stand-in for ``ray`` (the extra may be missing, and a real instance takes long to start here):
    every ``wait`` delivers a SIGTERM to this process, as a user's ``kill`` would."""
    return types.SimpleNamespace(
        is_initialized=lambda: initialized,
        init=init or (lambda **kw: calls.append("init")),
        shutdown=lambda: calls.append("shutdown"),
        cancel=lambda ref, force: calls.append("cancel"),
        cluster_resources=lambda: {"CPU": 2.0},
        remote=lambda fn: types.SimpleNamespace(options=lambda **kw: types.SimpleNamespace(
            remote=lambda *a: object())),
        wait=lambda refs, num_returns, timeout: os.kill(os.getpid(), signal.SIGTERM) or ([], refs),
        get=lambda ref: None,
    )


TODO = [(16, "fa2"), (32, "fa2"), (48, "fa2")]


def _interrupted_ray_sweep(monkeypatch, fake) -> None:
    from attnum.studies.paper.point import Point
    from attnum.sweep import executor_ray, executors

    monkeypatch.setitem(sys.modules, "ray", fake)
    todo = [Point(seq_len=n, policy=p) for n, p in TODO]
    with executors.Interrupts() as stop, pytest.raises(KeyboardInterrupt):
        list(executor_ray.ray_points(todo, (), 2, stop))
    assert stop.signum == signal.SIGTERM


def test_local_ray_is_shut_down_not_cancelled_when_the_sweep_is_interrupted(monkeypatch):
    """A local instance started by the sweep is shut down (its workers with it). Its tasks are not
    force-cancelled first: Ray 2.x's driver aborted on that ("Tried to complete task that was not
    pending", exit 1 instead of 130, seen in CI)."""
    calls = []
    _interrupted_ray_sweep(monkeypatch, _fake_ray(calls))
    assert calls == ["init", "shutdown"]


def test_tasks_on_a_cluster_are_cancelled_and_the_cluster_is_left_running(monkeypatch):
    calls = []
    _interrupted_ray_sweep(monkeypatch, _fake_ray(calls, initialized=True))
    assert calls == ["cancel"] * len(TODO)


def test_sigterm_inside_ray_init_is_an_interruption(monkeypatch):
    """``ray.init`` installs ``sys.exit(15)`` as SIGTERM's handler before it connects (and its C++ core a
    failure handler that aborted the process): a SIGTERM sent then must still end the sweep as
    interrupted (exit 130), not as SystemExit(15) or SIGABRT, with our handler back."""
    calls = []

    def init(**kw):
        calls.append("init")
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init does
        os.kill(os.getpid(), signal.SIGTERM)

    from attnum.sweep import executor_ray, executors
    with executors.Interrupts() as stop:
        ours = signal.getsignal(signal.SIGTERM)
        monkeypatch.setitem(sys.modules, "ray", _fake_ray(calls, init=init))
        with pytest.raises(KeyboardInterrupt):
            list(executor_ray.ray_points([], (), 2, stop))
        assert stop.signum == signal.SIGTERM and signal.getsignal(signal.SIGTERM) == ours
    assert calls == ["init", "shutdown"]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the ray extra is not installed")
def test_sigterm_with_ray_shuts_ray_down(tmp_path):
    """ray.init installs its own SIGTERM handler; the sweep takes the signal back, so the run ends as
    ``interrupted`` (exit 130) and the local Ray instance it started goes with it."""
    spec, out = write_spec(tmp_path, LONG_SPEC), tmp_path / "out"
    proc = popen_cli("sweep", spec, "--out", out, "--quiet", "--jobs", "2", "--executor", "ray")
    _wait_until(lambda: _rows(out / DB_NAME) or proc.poll() is not None, _paths.START_S, "a first row")
    assert proc.poll() is None, proc.stderr.read()
    below = descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=_paths.PATIENCE_S)
    assert code == 130, proc.stderr.read()
    proc.stderr.close()
    try:
        _wait_until(lambda: not _alive(below), _paths.PATIENCE_S, "Ray's processes to exit")
    finally:
        for p in _alive(below):
            os.kill(p, signal.SIGKILL)
    with open_store(out) as store:
        assert [r["status"] for r in store.runs()] == ["interrupted"]


def _sleeping_rank(rank: int, world_size: int) -> None:
    time.sleep(120)


def test_distributed_ranks_die_with_a_sigkilled_parent(tmp_path):
    """``run_ranks`` (attnum ring, distributed training): ranks blocked in work must not outlive their parent."""
    import subprocess

    from _sweep_helpers import cli_env

    code = ("import sys; sys.path[:0] = sys.argv[1:3]; from test_robust_store_kill import _sleeping_rank; "
            "from attnum.studies.parallel.spawn import run_ranks; run_ranks(_sleeping_rank, 2, timeout=120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parent), str(_paths.TESTS)], env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def ranks():
            return [p for p in descendants(proc.pid) if b"spawn_main" in _cmdline(p)]

        below = _wait_until(lambda: len(ranks()) >= 2 and ranks(), _paths.START_S, "two ranks")
        time.sleep(0.5)
    finally:
        proc.kill()
        proc.wait(timeout=_paths.PATIENCE_S)
    try:
        _wait_until(lambda: not _alive(below), _paths.PATIENCE_S, "the ranks to exit")
    finally:
        for p in _alive(below):
            os.kill(p, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
