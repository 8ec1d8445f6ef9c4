"""Waiting for a progress heartbeat without depending on how fast it comes.

A test that sleeps a fixed time and then expects a heartbeat line fails on a machine too loaded to run the
heartbeat thread in that time. These helpers poll for the line instead, for up to ``_paths.PATIENCE_S``:
on a healthy machine they return after one interval, on a loaded one later, never wrongly.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import _paths

from attnum.console import progress


def wait_until(cond: Callable[[], object], what: str) -> object:
    t0 = time.monotonic()
    while time.monotonic() - t0 < _paths.PATIENCE_S:
        got = cond()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError(f"not within {_paths.PATIENCE_S:g} s: {what}")


class Beats:
    """Every :class:`attnum.console.progress.Activity` made while installed (``monkeypatch``);
    :meth:`wait` returns once the newest one has printed ``n`` heartbeat lines."""

    def __init__(self, monkeypatch) -> None:
        self.made: list[progress.Activity] = []
        init = progress.Activity.__init__

        def record(act, *args, **kwargs):
            init(act, *args, **kwargs)
            self.made.append(act)

        monkeypatch.setattr(progress.Activity, "__init__", record)

    def lines(self) -> int:
        return self.made[-1].lines if self.made else 0

    def wait(self, n: int = 1) -> None:
        wait_until(lambda: self.lines() >= n, f"{n} heartbeat line(s) of {[a.title for a in self.made]}")
