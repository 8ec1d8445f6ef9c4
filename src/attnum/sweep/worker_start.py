"""How sweep workers start: forked from a single-threaded driver where that is safe, else spawned.

A spawned worker is a fresh interpreter that imports torch and attnum again (about 1.7 s of CPU on
a 2-core AMD EPYC VM, twice that under load) before its first point; a forked one starts with the
driver's modules already imported, in a few milliseconds. Fork is used only where it is safe:

- Linux (``fork`` exists and ``PR_SET_PDEATHSIG`` ties the worker to the driver);
- the driver runs no Python thread but its main one at that moment: no Python-level lock (stdout's, the
  import lock) can be held by a thread that the child would not have. torch's own idle native threads
  (``import torch`` starts one; intra-op threads after a parallel op) may exist: PyTorch's DataLoader
  forks its workers from such processes by default on Linux, and each worker here, as there, sets one
  intra-op thread before any op, so no OpenMP region is entered with the parent's vanished pool;
- CUDA is not initialized in the driver (a forked child cannot use it) and no point asks for CUDA.

Otherwise (macOS, Windows, a driver running Python threads, CUDA points) the pool
spawns, as before. Either way every worker runs one intra-op thread (:data:`POINT_THREADS`), ignores
Ctrl-C (the driver stops it) and dies with its driver.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from attnum.sandbox.processes import die_with_parent

# Every point runs single-threaded and parallelism comes from running points side by side: the
# emulation is many small tensor ops, where torch's intra-op threads cost more than they give
# (measured on 2 busy cores: an N=4096 point took 1.0 s with 1 thread, 3.9 s with 2).
POINT_THREADS = 1


def start_method(points: list[Any]) -> str:
    """``fork`` where it is safe (see the module docstring), else ``spawn``."""
    if not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    if threading.active_count() != 1:
        return "spawn"
    if any(str(getattr(p, "device", "cpu")).startswith("cuda") for p in points):
        return "spawn"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "spawn"
    return "fork"


def package_root() -> str:
    """The folder holding the ``attnum`` package (a spawned worker's import path needs it)."""
    return str(Path(__file__).resolve().parent.parent)


def init_worker(threads: int, path_entries: list[str], driver_pid: int) -> None:
    """A worker's first act: die with the driver, leave Ctrl-C to it, one intra-op thread."""
    # A worker dies with its driver, even a SIGKILLed one (else it lingers, ~250 MB, holding the
    # driver's stdout), and leaves Ctrl-C to the driver, which stops it.
    die_with_parent(driver_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker inherits the driver's handler
    # spawn starts a fresh interpreter: give it our import path, and one thread per worker
    # rather than let every worker's torch grab every core.
    for entry in reversed(path_entries):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    import torch

    torch.set_num_threads(threads)
