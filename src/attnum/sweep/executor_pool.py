"""The sweep's local process pool: points run in worker processes, results come back to the driver.

:class:`PoolRun` starts the workers (forked or spawned, :mod:`attnum.sweep.worker_start`), keeps a bounded
number of points in flight, records the points of a broken pool as failed, and stops every worker and
the resource tracker it started when the sweep ends, however it ends.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from attnum.sweep.point_runner import run_point
from attnum.sweep.worker_start import POINT_THREADS, init_worker, package_root, start_method

if TYPE_CHECKING:
    from attnum.sweep.interrupts import Interrupts


class PoolRun:
    """The process pool's results, as an iterator with ``close()``.

    The workers start, and take their first points, when it is made: before the driver starts its
    progress display, so a fork happens while the driver has one thread (see
    :mod:`attnum.sweep.worker_start`) and the workers' start overlaps the driver's own. ``close()`` stops
    the workers whether or not the iteration began; no worker outlives the sweep.
    """

    def __init__(self, todo: list[Any], kernels: tuple[str, ...], jobs: int, stop: Interrupts) -> None:
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context(start_method(todo))
        self._new_pool = lambda: ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=init_worker,
                                                     initargs=(POINT_THREADS, [package_root()], os.getpid()))
        self._tracker_was_running = _tracker_running()
        self._kernels, self._stop = kernels, stop
        self._pending: dict[Any, Any] = {}
        self._queue = list(reversed(todo))
        self._window = 4 * jobs  # bounded in flight: Ctrl-C loses at most these, and memory stays flat
        self._pool = self._new_pool()
        self._gen = self._results()
        try:
            self._fill()
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[tuple[Any, dict]]:
        return self._gen

    def __next__(self) -> tuple[Any, dict]:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()  # runs the generator's finally if it started
        self._shut()  # else here (a no-op once done)

    def _fill(self) -> None:
        while self._queue and len(self._pending) < self._window:
            p = self._queue.pop()
            self._pending[self._pool.submit(run_point, p.config(), self._kernels)] = p

    def _results(self) -> Iterator[tuple[Any, dict]]:
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        pending = self._pending
        try:
            while self._queue or pending:
                self._fill()
                finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                self._stop.check()
                broken = False
                for fut in finished:
                    p = pending.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool as err:
                        broken = True
                        result = lost_point(p, f"worker process died ({err}); rerun the sweep to retry")
                    yield p, result
                if broken:
                    # Which point killed its worker (out of memory, a signal) is unknown: every point in
                    # flight is recorded as failed, so a resume retries them, and a fresh pool goes on.
                    for p in pending.values():
                        yield p, lost_point(p, "worker pool broke while this point ran; rerun the sweep to retry")
                    pending.clear()
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = self._new_pool()
        finally:
            self._shut()

    def _shut(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list(getattr(pool, "_processes", {}).values())
        if self._pending:  # interrupted, or the consumer failed: stop the points in flight now
            _stop_workers(pool)
        pool.shutdown(wait=not self._pending, cancel_futures=True)
        for proc in procs:  # no worker outlives its sweep, not even as a zombie
            proc.join(timeout=10)
        if not self._tracker_was_running:  # spawn started multiprocessing's resource tracker: stop it too
            _stop_tracker()


def _tracker_running() -> bool:
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_pid", None) is not None


def _stop_tracker() -> None:
    """Stop the resource-tracker process the pool's spawn started (it would live on as a child of
    the driver, then a few ms past its exit); nothing is registered with it once the pool is joined."""
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        try:
            stop()
        except (OSError, ChildProcessError, TypeError):  # TypeError: a tracker stopped meanwhile
            pass


def _stop_workers(pool) -> None:
    """Terminate a pool's workers (else interpreter exit waits for the points they are running)."""
    for proc in list(getattr(pool, "_processes", {}).values()):
        try:
            proc.terminate()
        except (OSError, ValueError):
            pass


def lost_point(p: Any, message: str) -> dict[str, Any]:
    """The result row of a point whose worker was lost."""
    return {"key": p.key, "status": "failed", "metrics": None, "error": message}
