"""The sweep's Ray executor: points as Ray tasks on RAY_ADDRESS's cluster, else on a local instance.

The driver alone writes the store (:mod:`attnum.sweep.executors`); this module submits a bounded number of
tasks, yields their results, and on any exit shuts down a local instance it started or cancels its
tasks on a cluster.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from attnum.errors import bad_value
from attnum.sweep.point_runner import run_point
from attnum.sweep.worker_start import package_root

if TYPE_CHECKING:
    from attnum.sweep.interrupts import Interrupts


def ray_points(todo: list[Any], kernels: tuple[str, ...], jobs: int, stop: Interrupts) -> Iterator[tuple[Any, dict]]:
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


def _ray_init(ray: Any, jobs: int, stop: Interrupts) -> None:
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
