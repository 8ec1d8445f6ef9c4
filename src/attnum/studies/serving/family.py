"""The serving family in the registry: kinds ``decode`` and ``fp8-table``; findings, report, profiles."""

from __future__ import annotations

from typing import Any

from attnum.studies.serving.decode import DECODE_FIELDS
from attnum.studies.serving.figures import report
from attnum.studies.serving.inference import PROFILES, DecodePoint, FP8TablePoint, inference_findings, inference_spec
from attnum.sweep.registry import Family, StudyKind


def _run(point: Any, kernels: tuple[str, ...]) -> dict[str, Any]:
    return point.run()


FAMILY = Family(
    name="serving",
    order=1,
    kinds=(
        StudyKind(name="decode", point_type=DecodePoint, run=_run, axes=DECODE_FIELDS),
        StudyKind(name="fp8-table", point_type=FP8TablePoint, run=_run),
    ),
    findings=inference_findings,
    report=report,
    profiles=dict.fromkeys(PROFILES, inference_spec),
)
