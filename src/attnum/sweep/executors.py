"""Run a sweep's points into a store: in this process, in a process pool, or as Ray tasks.

Whatever the executor, only this (driver) process writes the store, one commit per finished point,
so resume behaves the same everywhere: points already done are skipped, failed ones are retried.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnum.console.progress import SweepProgress
from attnum.errors import bad_value
from attnum.store.db import Store
from attnum.sweep.eta import CostModel
from attnum.sweep.executor_pool import PoolRun
from attnum.sweep.executor_ray import ray_points
from attnum.sweep.interrupts import Interrupts
from attnum.sweep.point_runner import run_point
from attnum.sweep.spec import SweepSpec
from attnum.sweep.worker_start import POINT_THREADS

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
    with Store(options.out, command=options.command) as store, Interrupts() as stop:
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


def _check_devices(planned: dict, options: SweepOptions) -> None:
    """CUDA points on a local executor need CUDA here; refuse before any point runs.
    (Ray tasks may land on GPU nodes the driver does not have, so Ray is not checked.)"""
    import torch

    wants_cuda = any(p.device.startswith("cuda") for p, _ in planned.values())
    if wants_cuda and options.executor != "ray" and not torch.cuda.is_available():
        raise bad_value("device", "cuda", "'cpu' here (CUDA is not available on this machine; "
                        "run on a GPU machine or with --executor ray on a cluster with GPUs)")


def _execute(todo: list[Any], kernels: tuple[str, ...], options: SweepOptions,
             stop: Interrupts) -> Iterator[tuple[Any, dict]]:
    if not todo:
        return iter(())
    if options.executor == "ray":
        return ray_points(todo, kernels, options.jobs, stop)
    if options.jobs == 1:
        return _in_process(todo, kernels)
    return PoolRun(todo, kernels, options.jobs, stop)


def _in_process(todo: list[Any], kernels: tuple[str, ...]) -> Iterator[tuple[Any, dict]]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(POINT_THREADS)
    try:
        for p in todo:
            yield p, run_point(p.config(), kernels)
    finally:
        torch.set_num_threads(before)
