"""Run one point and return a plain, picklable result (spawn-safe, Ray-safe).

``run_point`` never raises for a problem in the point itself: a point that fails is returned with
``status="failed"`` and its message, so that a sweep records it and goes on.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from attnum.sweep.registry import get_kind


def run_point(config: dict[str, Any], kernels: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the point described by ``config`` (a point's ``config()`` dict); never raises for it.

    The point's kind (``config["kind"]``) says which study runs it (:mod:`attnum.sweep.registry`);
    ``kernels`` names the real kernels a point that runs them uses (the spec's list).
    """
    started = time.time()
    t0 = time.perf_counter()
    kind = get_kind(config.get("kind"))
    point = kind.point(config)
    try:
        metrics = _plain(kind.run(point, kernels))
        status, error = "done", None
    except Exception as err:  # noqa: BLE001 - a failing point is data, not a crash
        metrics = None
        status = "failed"
        error = f"{type(err).__name__}: {err}"
        tb = traceback.extract_tb(err.__traceback__)
        if tb:
            error += f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})"
    return {
        "key": point.key,
        "status": status,
        "metrics": metrics,
        "error": error,
        "started_at": started,
        "wall_s": time.perf_counter() - t0,
        "env": environment(point.device),
        "worker": f"{socket.gethostname()}:{os.getpid()}",
    }


def _plain(obj: Any) -> Any:
    """JSON-able copy: tensors and numpy scalars become floats, tuples lists."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, float):
        return obj
    try:
        return float(obj)
    except (TypeError, ValueError):
        return str(obj)


@functools.lru_cache(maxsize=8)
def environment(device: str = "cpu") -> dict[str, Any]:
    """Versions, device and git commit of the process that ran the point (cached per process)."""
    import torch

    import attnum

    env = {
        "attnum": getattr(attnum, "__version__", "unknown"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "device": device,
        "device_name": _device_name(device),
        "torch_threads": torch.get_num_threads(),
        # Which vectorised kernels torch's CPU ops dispatch to (AVX2, AVX512, ...): it changes CPU results.
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "git_commit": _git_commit(),
    }
    return env


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        try:
            return torch.cuda.get_device_name(torch.device(device))
        except Exception as err:  # noqa: BLE001 - no CUDA here: the point itself will fail and say so
            return f"unavailable ({type(err).__name__})"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


if __name__ == "__main__":  # pragma: no cover - manual smoke: python -m attnum.sweep.point_runner
    print(run_point({"kind": "compare", "seq_len": 128, "policy": "fa2"}), file=sys.stdout)
