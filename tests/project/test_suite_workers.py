"""``pytest -n auto`` (the README's Quickstart) takes one worker per core this process may run on, at most
conftest.MAX_AUTO_WORKERS."""

from __future__ import annotations

import os

import conftest
import pytest


@pytest.mark.parametrize("cores,workers", [(1, 1), (2, 2), (3, 3), (4, 4), (64, 4)])
def test_auto_workers_follow_the_cores_up_to_the_cap(monkeypatch, cores, workers):
    if not hasattr(os, "sched_getaffinity"):
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
    else:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert conftest.pytest_xdist_auto_num_workers(None) == workers
