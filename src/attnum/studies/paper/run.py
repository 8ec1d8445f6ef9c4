"""How one point of the paper family runs: ``compare``, ``attribute`` and ``kernels`` (the sweep runner
calls these through the registry, in a worker; they return the metrics stored for the point)."""

from __future__ import annotations

from typing import Any

from attnum.studies.paper.point import Point


def run_compare_point(point: Point, kernels: tuple[str, ...] = ()) -> dict[str, Any]:
    """Flash and baseline against the float64 golden at this point: the deviations, ratio, tiles, timings."""
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
    return metrics


def run_attribute_point(point: Point, kernels: tuple[str, ...] = ()) -> dict[str, Any]:
    """The error budget per rounding site at this point (:func:`attnum.studies.paper.attribute.run_attribute`)."""
    from attnum.studies.paper.attribute import run_attribute

    result = run_attribute(point.compare_config())
    keep = ("full", "floor", "sites", "dominant", "tiles", "carrier", "metric", "policy", "baseline_policy")
    return {**{k: result[k] for k in keep}, "timing_s": {"total": result["timing_s"]},
            "format_bits": _format_bits(point.format)}


def _format_bits(fmt: str) -> dict[str, int]:
    """Stored so the report can order formats by mantissa bits without importing the numerics."""
    from attnum.numerics.formats import get_format

    f = get_format(fmt)
    return {"ebits": f.ebits, "mbits": f.mbits}


def run_kernels_point(point: Point, kernels: tuple[str, ...] = ()) -> dict[str, Any]:
    """Each requested real kernel's deviation from the float64 golden at this point's inputs."""
    from attnum.numerics.formats import torch_dtype
    from attnum.studies.paper.kernel_point import kernel_deviations

    dtype = torch_dtype(point.format)  # a kernels Point only holds formats that have one
    return {**kernel_deviations(point, dtype=dtype, kernels=kernels), "format_bits": _format_bits(point.format)}
