"""The parallel family in the registry: kind ``ring`` (simulated ring attention); ``attnum ring`` and
its all-reduce study write their own report (:mod:`.report`)."""

from __future__ import annotations

from typing import Any

from attnum.studies.parallel.point import RING_FIELDS, RingPoint
from attnum.sweep.registry import Family, StudyKind


def _run(point: RingPoint, kernels: tuple[str, ...]) -> dict[str, Any]:
    return point.run()


FAMILY = Family(
    name="parallel",
    order=2,
    kinds=(
        StudyKind(name="ring", point_type=RingPoint, run=_run, axes=RING_FIELDS, metrics=(
            ("max_abs", "max |ring - golden|"),
            ("mean_abs", "mean |ring - golden|"),
            ("single_max_abs", "max |single-device flash - golden|"),
            ("ratio_to_single", "ring / single-device mean error"),
        )),
    ),
)
