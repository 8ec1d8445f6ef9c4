"""Run a sweep's points into a store: in this process, in a process pool, or as Ray tasks.

Whatever the executor, only this (driver) process writes the store, one commit per finished point,
so resume behaves the same everywhere: points already done are skipped, failed ones are retried.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnum.errors import bad_value
from attnum.eta import CostModel
from attnum.experiments.point_runner import run_point
from attnum.experiments.spec import SweepSpec
from attnum.report.progress import SweepProgress
from attnum.store import Store
from attnum.worker_start import POINT_THREADS, init_worker, package_root, start_method

EXECUTORS = ("local", "ray")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepOptions:
    """How to run a sweep; fields map 1:1 to ``attnum sweep`` flags."""

    out: Path
    jobs: int = 1
    executor: str = "local"
    quiet: bool = False
    command: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, int) or self.jobs < 1:
            raise bad_value("--jobs", self.jobs, "a positive integer")
        if self.executor not in EXECUTORS:
            raise bad_value("--executor", self.executor, f"one of {EXECUTORS}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepSummary:
    planned: int
    skipped: int
    ran: int
    failed: int
    store_path: Path


def run_order(todo: list[Any], spec_hash: str) -> list[Any]:
    """The order the points run in: shuffled, seeded by the spec's hash (the same every time).

    A spec lists its points grid by grid, and the costly ones (the largest N) often come last; run in
    that order, the points done at any moment say little about the points left, and no ETA drawn from
    them can be right (a replay of the quick profile: 0.35x of the time left at half the points). In a
    shuffled order the points done are a fair sample of the points left. Results do not depend on the
    order: every point is seeded by its own config.
    """
    import random

    out = list(todo)
    random.Random(int(spec_hash[:16], 16) if spec_hash else 0).shuffle(out)
    return out


def run_sweep(spec: SweepSpec, options: SweepOptions) -> SweepSummary:
    """Plan the spec's points in ``options.out``'s store, run the ones not done, commit each as it ends.

    SIGINT and SIGTERM end the run cleanly: workers are stopped, the run is recorded
    ``interrupted``, the WAL is checkpointed, and KeyboardInterrupt propagates (exit 130).
    """
    planned = spec.planned()
    _check_devices(planned, options)
    with Store(options.out, command=options.command) as store, _Interrupts() as stop:
        store.bind_spec(name=spec.name, spec_hash=spec.spec_hash, canonical=spec.canonical(), source=spec.source)
        store.plan((k, p.kind, groups, p.config()) for k, (p, groups) in planned.items())
        done = store.done_keys()
        todo = run_order([p for k, (p, _) in planned.items() if k not in done], spec.spec_hash)
        run_id = store.begin_run(
            command=options.command, n_todo=len(todo), executor=options.executor, jobs=options.jobs
        )
        status = "failed"  # an error ended it (a disk that refused, a bug)
        failed = 0
        results = _execute(todo, spec.kernel_names, options, stop)
        try:
            with SweepProgress(
                total=len(todo), skipped=len(planned) - len(todo), title=spec.name, quiet=options.quiet,
                cost=CostModel(todo),
            ) as progress:
                for point, result in results:
                    store.write(result, run_id)
                    failed += result["status"] != "done"
                    progress.advance(point.label(), result, point)
                    stop.check()
            stop.check()
            status = "complete" if not failed else "complete-with-failures"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            stop.cleaning_up = True  # a second Ctrl-C must not cut the recording of this one short
            try:
                # Recorded (and the WAL checkpointed) before the workers are stopped: only this
                # process writes the store, and a library that dies while stopping its workers
                # (Ray has) must not leave the run unrecorded.
                store.end_run(run_id, status)
            finally:
                if hasattr(results, "close"):
                    results.close()  # stops the workers of an interrupted run now
        return SweepSummary(
            planned=len(planned), skipped=len(planned) - len(todo), ran=len(todo), failed=failed, store_path=store.path
        )


class _Interrupts:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the driver, and are also remembered.

    The flag makes an interruption stick (a KeyboardInterrupt raised while Python runs a finaliser
    or a weakref callback is printed and dropped); the loops check it as well. While cleaning up,
    further signals are only recorded. A signal this process inherited as ignored stays ignored, as
    POSIX shells expect of a background job (``cmd &`` in a script ignores SIGINT); SIGTERM still
    stops such a sweep cleanly.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.cleaning_up = False
        self._before: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._before[sig] = signal.signal(sig, self._handle)
        return self

    def reinstall(self) -> None:
        """Take the signals back from a library that installed its own (``ray.init`` does, for SIGTERM)."""
        for sig in self._before:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        first = self.signum is None
        self.signum = signum
        if first and not self.cleaning_up:
            raise KeyboardInterrupt(signal.Signals(signum).name)

    def check(self) -> None:
        if self.signum is not None and not self.cleaning_up:
            raise KeyboardInterrupt(signal.Signals(self.signum).name)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)


def _check_devices(planned: dict, options: SweepOptions) -> None:
    """CUDA points on a local executor need CUDA here; refuse before any point runs.
    (Ray tasks may land on GPU nodes the driver does not have, so Ray is not checked.)"""
    import torch

    wants_cuda = any(p.device.startswith("cuda") for p, _ in planned.values())
    if wants_cuda and options.executor != "ray" and not torch.cuda.is_available():
        raise bad_value("device", "cuda", "'cpu' here (CUDA is not available on this machine; "
                        "run on a GPU machine or with --executor ray on a cluster with GPUs)")


def _execute(todo: list[Any], kernels: tuple[str, ...], options: SweepOptions,
             stop: _Interrupts) -> Iterator[tuple[Any, dict]]:
    if not todo:
        return iter(())
    if options.executor == "ray":
        return _ray(todo, kernels, options.jobs, stop)
    if options.jobs == 1:
        return _in_process(todo, kernels)
    return _PoolRun(todo, kernels, options.jobs, stop)


def _in_process(todo: list[Any], kernels: tuple[str, ...]) -> Iterator[tuple[Any, dict]]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(POINT_THREADS)
    try:
        for p in todo:
            yield p, run_point(p.config(), kernels)
    finally:
        torch.set_num_threads(before)


# ---- process pool ----------------------------------------------------------------------------


class _PoolRun:
    """The process pool's results, as an iterator with ``close()``.

    The workers start, and take their first points, when it is made: before the driver starts its
    progress display, so a fork happens while the driver has one thread (see
    :mod:`attnum.worker_start`) and the workers' start overlaps the driver's own. ``close()`` stops
    the workers whether or not the iteration began; no worker outlives the sweep.
    """

    def __init__(self, todo: list[Any], kernels: tuple[str, ...], jobs: int, stop: _Interrupts) -> None:
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
                        result = _lost(p, f"worker process died ({err}); rerun the sweep to retry")
                    yield p, result
                if broken:
                    # Which point killed its worker (out of memory, a signal) is unknown: every point in
                    # flight is recorded as failed, so a resume retries them, and a fresh pool goes on.
                    for p in pending.values():
                        yield p, _lost(p, "worker pool broke while this point ran; rerun the sweep to retry")
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


def _lost(p: Any, message: str) -> dict[str, Any]:
    return {"key": p.key, "status": "failed", "metrics": None, "error": message}


# ---- Ray -------------------------------------------------------------------------------------


def _ray(todo: list[Any], kernels: tuple[str, ...], jobs: int, stop: _Interrupts) -> Iterator[tuple[Any, dict]]:
    """Points as Ray tasks on RAY_ADDRESS's cluster, else on a local instance started here."""
    try:
        import ray
    except ImportError:
        raise bad_value("--executor", "ray", "'local' (ray is not installed; pip install 'attnum[ray]')") from None
    started_here = False
    if not ray.is_initialized():
        started_here = True
        try:
            _ray_init(ray, jobs, stop)
        except BaseException:  # interrupted while starting, or refused: stop what was started
            ray.shutdown()
            raise
    # Bounded in flight, as in the process pool: an interruption then cancels a few tasks, not the
    # whole sweep's, and the cluster still gets enough to keep every CPU busy.
    window = 4 * max(jobs, int(ray.cluster_resources().get("CPU", 1)))
    remote = ray.remote(run_point)
    pending: dict[Any, Any] = {}
    queue = list(reversed(todo))
    try:
        while queue or pending:
            while queue and len(pending) < window:
                p = queue.pop()
                gpus = 1 if p.device.startswith("cuda") else 0  # one GPU per task when the point asks for CUDA
                pending[remote.options(num_cpus=1, num_gpus=gpus, max_retries=1).remote(p.config(), kernels)] = p
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            stop.check()
            for ref in ready:
                p = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as err:  # noqa: BLE001 - a lost worker is a failed point, not a crash
                    result = {"key": p.key, "status": "failed", "metrics": None,
                              "error": f"ray task failed: {type(err).__name__}: {err}"}
                yield p, result
    finally:
        # On every exit (done, error, SIGINT/SIGTERM) stop what is left. A local instance started
        # here is shut down, its workers with it; cancelling its tasks first is not only useless
        # but unsafe (Ray 2.x's driver can abort on a task that completes while it is force-
        # cancelled: "Tried to complete task that was not pending"). On a cluster the tasks are
        # cancelled. (A SIGKILLed driver can do neither; Ray's processes then notice the lost driver.)
        if started_here:
            ray.shutdown()
        else:
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - shutting down regardless
                    pass


def _ray_init(ray: Any, jobs: int, stop: _Interrupts) -> None:
    """Connect to RAY_ADDRESS's cluster, else start a local instance with ``jobs`` CPUs.

    ``ray.init`` installs SIGTERM handlers of its own as it starts: ``sys.exit(15)`` in Python, and
    its C++ core's failure handler in this driver, which aborted the process (SIGABRT, not exit 130)
    when a SIGTERM landed mid-start. The first is turned back into this sweep's interruption; the
    second is not installed in the driver (Ray's own switch, ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``,
    read when the driver's core starts; Ray's workers keep theirs). Our handlers are reinstalled after.
    """
    address = os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False}
    if address is None:
        # A local instance: workers need our import path; a real cluster must have attnum installed.
        kwargs["num_cpus"] = jobs if jobs > 1 else None  # --jobs 1 (the default): every CPU here
        path = os.pathsep.join(filter(None, [package_root(), os.environ.get("PYTHONPATH")]))
        kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if hasattr(constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"):
        constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    try:
        ray.init(**kwargs)
    except ConnectionError as err:
        raise bad_value("RAY_ADDRESS", address, f"the address of a running Ray cluster ({err}); "
                        "unset it to start a local one") from None
    except SystemExit as exit_:  # Ray's sys.exit(15): a SIGTERM while it started
        if exit_.code != signal.SIGTERM:
            raise
        stop.signum = signal.SIGTERM
        raise KeyboardInterrupt("SIGTERM") from None
    finally:
        stop.reinstall()
