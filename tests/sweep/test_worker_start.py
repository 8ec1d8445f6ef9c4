"""How sweep workers start: fork only where it is safe, one intra-op thread in every worker."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import pytest
import torch

from attnum.sweep.worker_start import POINT_THREADS, init_worker, package_root, start_method

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is chosen on Linux only")


@linux
def test_fork_from_a_driver_with_only_its_main_thread(monkeypatch):
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # whatever threads earlier tests left
    assert start_method([SimpleNamespace(device="cpu")]) == "fork"


@linux
def test_spawn_while_another_python_thread_runs():
    release = threading.Event()
    t = threading.Thread(target=release.wait)
    t.start()
    try:
        assert start_method([SimpleNamespace(device="cpu")]) == "spawn"
    finally:
        release.set()
        t.join()


def test_spawn_when_a_point_wants_cuda():
    assert start_method([SimpleNamespace(device="cpu"), SimpleNamespace(device="cuda:0")]) == "spawn"


def _threads_and_sigterm() -> tuple[int, bool]:
    import signal

    return torch.get_num_threads(), signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_every_worker_runs_one_intra_op_thread(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    ctx = multiprocessing.get_context(method)
    with ProcessPoolExecutor(2, mp_context=ctx, initializer=init_worker,
                             initargs=(POINT_THREADS, [package_root()], os.getpid())) as pool:
        got = set(pool.map(lambda_free_probe, range(4)))
    assert got == {(POINT_THREADS, True)}


def lambda_free_probe(_: int) -> tuple[int, bool]:
    return _threads_and_sigterm()
