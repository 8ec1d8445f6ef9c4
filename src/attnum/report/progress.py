"""Sweep progress: a rich bar with ETA on a terminal, or one plain log line per point (``--quiet``)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class SweepProgress:
    """Reports each finished point. Use as a context manager around the sweep."""

    def __init__(self, *, total: int, skipped: int, title: str, quiet: bool, stream: TextIO | None = None) -> None:
        self.total, self.skipped, self.title, self.quiet = total, skipped, title, quiet
        self.stream = stream or sys.stderr
        self.done = self.failed = 0
        self._t0 = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> SweepProgress:
        head = f"{self.title}: {self.total} points to run"
        if self.skipped:
            head += f", {self.skipped} already done (skipped)"
        if self.quiet or not self.total:
            print(head, file=self.stream, flush=True)
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(file=self.stream),
            transient=False,
        )
        self._bar.__enter__()
        self._bar.console.print(head)
        self._task = self._bar.add_task(self.title, total=self.total, failed=0)
        return self

    def advance(self, label: str, result: dict[str, Any]) -> None:
        self.done += 1
        failed = result["status"] != "done"
        self.failed += failed
        if self._bar is not None:
            self._bar.update(self._task, advance=1, failed=self.failed)
            if failed:
                self._bar.console.print(f"[red]failed[/red] {label}: {result.get('error')}")
            return
        elapsed = time.perf_counter() - self._t0
        eta = elapsed / self.done * (self.total - self.done)
        state = f"FAILED {result.get('error')}" if failed else "ok"
        print(
            f"[{self.done}/{self.total}] {label} {state} {result.get('wall_s', 0.0):.2f}s eta {eta:.0f}s",
            file=self.stream,
            flush=True,
        )

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elapsed = time.perf_counter() - self._t0
        print(
            f"{self.title}: {self.done}/{self.total} points in {elapsed:.1f}s, {self.failed} failed",
            file=self.stream,
            flush=True,
        )
