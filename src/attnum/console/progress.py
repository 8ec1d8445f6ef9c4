"""Progress of long commands, one mechanism for all of them.

On a terminal: a rich bar with ETA (sweeps) or a spinner (``validate``, ``compare --grad``). When
stderr is not a terminal (CI, nohup, a log file) nothing redraws; instead :class:`Activity` prints a
plain line every few seconds (``ATTNUM_PROGRESS_INTERVAL``, default 5), and a sweep prints one line
per point as well. Everything goes to stderr, so ``--json`` output on stdout stays one document.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, TextIO

INTERVAL_ENV = "ATTNUM_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 5.0


def interval_s() -> float:
    """Seconds between plain progress lines: ``ATTNUM_PROGRESS_INTERVAL`` or 5 (a bad value: 5)."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if 0 < value < float("inf") else DEFAULT_INTERVAL_S


_command_t0: float | None = None  # perf_counter() when the command started (see command_started)


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc), so that "elapsed" includes the interpreter's
    and torch's start-up the user waited through; None where it cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: start time in ticks
    except (OSError, ValueError, IndexError):
        return None


def command_started(age_s: float | None = 0.0) -> None:
    """The CLI calls this first thing: every Activity's elapsed time and "finished in" count from the
    command's start (``age_s`` seconds ago), not from when the work itself began; ``None`` when the
    command is over (an Activity outside a command counts from its own start)."""
    global _command_t0
    _command_t0 = None if age_s is None else time.perf_counter() - age_s


def is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a file
        return False


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"



def escape(text: str) -> str:
    """``text`` for rich, as data: a name like ``t[/]iny`` is shown, never read as markup."""
    from rich.markup import escape as _escape

    return _escape(text)

class Activity:
    """A long step: a spinner on a terminal (``spinner=True``), plain heartbeat lines otherwise.

    ``with Activity("validate", spinner=True) as act: ...``; ``act.update(done, total, label)``
    refines what the next line says. Off a terminal the first line comes after one interval, so a
    command that finishes sooner prints nothing extra.
    """

    def __init__(self, title: str, *, spinner: bool = False, stream: TextIO | None = None,
                 total: int | None = None, unit: str | None = None, eta: bool = False) -> None:
        # unit: what ``done`` counts ("3 of 15 runs", "4 figures drawn"); eta: add the time left,
        # from the mean time of the units done so far (since the first update(done=...)), as a sweep does.
        self.title, self.spinner, self.total, self.unit, self.eta = title, spinner, total, unit, eta
        self._work_t0: float | None = None
        self.stream = stream if stream is not None else sys.stderr
        self.done: int | None = None
        self.label: str | None = None
        self.lines = 0
        self.announce_end = True
        self.mode = "off"
        now = time.perf_counter()
        self._t0 = min(now, _command_t0) if _command_t0 is not None else now
        self._quiet_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status: Any = None

    def update(self, done: int | None = None, total: int | None = None, label: str | None = None) -> None:
        if done is not None:
            self.done = done
            if self._work_t0 is None:
                self._work_t0 = time.perf_counter()
        if total is not None:
            self.total = total
        if label is not None:
            self.label = label
        if self._status is not None:
            self._status.update(escape(self._text()))

    def printed(self) -> None:
        """Someone else just printed a progress line: the next heartbeat waits a whole interval."""
        self._quiet_until = time.perf_counter() + interval_s()

    def _text(self) -> str:
        parts = [f"{self.title}: running, {_clock(time.perf_counter() - self._t0)} elapsed"]
        if self.done is not None:
            if self.unit:
                parts.append(f"{self.done} of {self.total} {self.unit}" if self.total is not None
                             else f"{self.done} {self.unit}")
            else:
                parts.append(f"{self.done}/{self.total}" if self.total is not None else f"{self.done} done")
            left = self.seconds_left()
            if left is not None:
                parts.append(f"eta {_clock(left)}")
        if self.label:
            parts.append(self.label)
        return ", ".join(parts)

    def seconds_left(self) -> float | None:
        """With ``eta``: the mean time per unit done so far times the units left; None before the first
        unit is done (no estimate yet) or without ``eta``/``total``."""
        if not (self.eta and self.total and self.done and self._work_t0 is not None):
            return None
        spent = time.perf_counter() - self._work_t0
        return spent / self.done * max(0, self.total - self.done)

    def _beat(self) -> None:
        every = interval_s()
        while not self._stop.wait(every):
            if time.perf_counter() < self._quiet_until:
                continue
            try:
                print(f"attnum {self._text()}", file=self.stream, flush=True)
                self.lines += 1
            except (OSError, ValueError):  # the stream went away (closed pipe, closed file): stop quietly
                return

    def __enter__(self) -> Activity:
        if is_tty(self.stream):
            if self.spinner:
                from rich.console import Console

                self._status = Console(file=self.stream).status(escape(self._text()))
                self._status.__enter__()
                self.mode = "spinner"
            return self
        self.mode = "lines"
        self._thread = threading.Thread(target=self._beat, name=f"attnum-progress-{self.title}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._status is not None:
            self._status.__exit__(*exc)
        from attnum.errors import AttnumInputError

        if isinstance(exc[1], (AttnumInputError, FileNotFoundError)):
            return  # the input error is the line that ends the command: no "finished in" after it
        if self.lines and self.announce_end:  # whoever read the heartbeats learns that it ended
            print(f"attnum {self.title}: finished in {_clock(time.perf_counter() - self._t0)}",
                  file=self.stream, flush=True)


class SweepProgress:
    """Reports each finished point. Use as a context manager around the sweep.

    A rich bar on a terminal. ``quiet``: one plain line per point. Off a terminal without ``quiet``
    (CI, nohup, a log): a line per failed point at once, and an :class:`Activity` heartbeat every
    interval saying how many points are done, failed, and the ETA -- a few lines a minute, however
    many points."""

    def __init__(self, *, total: int, skipped: int, title: str, quiet: bool, stream: TextIO | None = None,
                 cost: Any = None) -> None:
        self.total, self.skipped, self.title, self.quiet = total, skipped, title, quiet
        self.cost = cost  # an attnum.sweep.eta.CostModel of the points to run: the ETA from the work left
        self.stream = stream or sys.stderr
        self.done = self.failed = 0
        self._t0 = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        self._beat: Activity | None = None

    def __enter__(self) -> SweepProgress:
        head = f"{self.title}: {self.total} points to run"
        if self.skipped:
            head += f", {self.skipped} already done (skipped)"
        if self.quiet or not self.total or not is_tty(self.stream):
            print(head, file=self.stream, flush=True)
            if self.total:
                self._beat = Activity(self.title, stream=self.stream, total=self.total).__enter__()
                self._beat.update(done=0)
                self._beat.printed()
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._bar = Progress(
            TextColumn("{task.description}", style="bold", markup=False),  # the spec's name is data
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            console=Console(file=self.stream),
            transient=False,
        )
        self._bar.__enter__()
        self._bar.console.print(head, markup=False, highlight=False)
        self._task = self._bar.add_task(self.title, total=self.total, failed=0, eta="-")
        return self

    def eta(self, point: Any = None, result: dict[str, Any] | None = None) -> float:
        """Seconds left: the cost model's (work left, calibrated on the points done) when there is
        one and it has seen enough points, else the mean time of the points done."""
        elapsed = time.perf_counter() - self._t0
        if self.cost is not None:
            if point is not None:
                self.cost.observe(point, (result or {}).get("wall_s"))
            eta = self.cost.eta(elapsed)
            if eta is not None:
                return eta
        return elapsed / self.done * (self.total - self.done) if self.done else 0.0

    def advance(self, label: str, result: dict[str, Any], point: Any = None) -> None:
        self.done += 1
        failed = result["status"] != "done"
        self.failed += failed
        eta = self.eta(point, result)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, failed=self.failed, eta=_clock(eta))
            if failed:
                what = escape(f"{label}: {result.get('error')}")  # a user's error text is data
                self._bar.console.print(f"[red]failed[/red] {what}")
            return
        if self._beat is not None:
            self._beat.update(done=self.done, label=f"{self.failed} failed, eta {eta:.0f}s")
        if self.quiet or failed:  # off a terminal without --quiet: failures at once, the rest in heartbeats
            state = f"FAILED {result.get('error')}" if failed else "ok"
            print(
                f"[{self.done}/{self.total}] {label} {state} {result.get('wall_s', 0.0):.2f}s eta {eta:.0f}s",
                file=self.stream,
                flush=True,
            )
            if self._beat is not None:
                self._beat.printed()

    def __exit__(self, *exc: object) -> None:
        if self._beat is not None:
            self._beat.announce_end = False  # the summary line below says it ended
            self._beat.__exit__(*exc)
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elapsed = time.perf_counter() - self._t0
        print(
            f"{self.title}: {self.done}/{self.total} points in {elapsed:.1f}s, {self.failed} failed",
            file=self.stream,
            flush=True,
        )
