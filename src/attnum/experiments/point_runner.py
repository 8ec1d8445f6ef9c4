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

from attnum.studies.paper.point import Point


def run_point(config: dict[str, Any], kernels: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the point described by ``config`` (a :meth:`Point.config` dict); never raises for it.

    ``kernels`` names the real kernels a ``kernels`` point runs (the spec's list).
    """
    started = time.time()
    t0 = time.perf_counter()
    point = Point.from_config(config)
    try:
        metrics = _RUNNERS[point.kind](point, kernels)
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


def _compare(point: Point) -> dict[str, Any]:
    from attnum.studies.paper.compare import run_compare

    result = run_compare(point.compare_config())
    metrics = {
        **result["metrics"],
        "ratio": result["ratio"],
        "tiles": result["tiles"],
        "policy_sites": result["policy"],
        "baseline_policy_sites": result["baseline_policy"],
        "timing_s": result["timing_s"],
        "format_bits": _format_bits(point.format),
    }
    return _plain(metrics)


def _attribute(point: Point) -> dict[str, Any]:
    from attnum.studies.paper.attribute import run_attribute

    result = run_attribute(point.compare_config())
    keep = ("full", "floor", "sites", "dominant", "tiles", "carrier", "metric", "policy", "baseline_policy")
    return _plain({**{k: result[k] for k in keep}, "timing_s": {"total": result["timing_s"]},
                   "format_bits": _format_bits(point.format)})


def _format_bits(fmt: str) -> dict[str, int]:
    """Stored so the report can order formats by mantissa bits without importing the numerics."""
    from attnum.formats import get_format

    f = get_format(fmt)
    return {"ebits": f.ebits, "mbits": f.mbits}


def _kernels(point: Point, kernels: tuple[str, ...]) -> dict[str, Any]:
    """Each requested real kernel's deviation from the float64 golden at this point's inputs."""
    from attnum.studies.paper.kernel_point import kernel_deviations
    from attnum.formats import torch_dtype

    dtype = torch_dtype(point.format)  # a kernels Point only holds formats that have one
    return _plain({**kernel_deviations(point, dtype=dtype, kernels=kernels), "format_bits": _format_bits(point.format)})


_RUNNERS = {
    "compare": lambda point, kernels: _compare(point),
    "attribute": lambda point, kernels: _attribute(point),
    "kernels": lambda point, kernels: _kernels(point, kernels),
    # decode and fp8-table points (attnum.studies.serving.inference) run themselves
    "decode": lambda point, kernels: _plain(point.run()),
    "fp8-table": lambda point, kernels: _plain(point.run()),
    # ring and spec points (attnum.studies.parallel.point) too
    "ring": lambda point, kernels: _plain(point.run()),
    "spec": lambda point, kernels: _plain(point.run()),
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


if __name__ == "__main__":  # pragma: no cover - manual smoke: python -m attnum.experiments.point_runner
    print(run_point(Point(seq_len=128, policy="fa2").config()), file=sys.stdout)
