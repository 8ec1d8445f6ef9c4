"""The speculative family in the registry: kind ``spec`` (exact TV per format and k).

The smallest complete family: one point kind, no findings, no report section of its own (its sweep
rows are drawn by the generic per-group figures from ``metrics``), two commands (:mod:`.cli`).
"""

from __future__ import annotations

from typing import Any

from attnum.studies.speculative.point import SPEC_FIELDS, SpecPoint
from attnum.sweep.registry import Family, StudyKind


def _run(point: SpecPoint, kernels: tuple[str, ...]) -> dict[str, Any]:
    return point.run()


FAMILY = Family(
    name="speculative",
    order=3,
    kinds=(
        StudyKind(name="spec", point_type=SpecPoint, run=_run, axes=SPEC_FIELDS, metrics=(
            ("tv", "TV(speculative, target)"),
            ("tv_plain", "TV(plain sampling, target)"),
            ("tv_first", "TV of the first token"),
            ("ratio", "TV / plain-sampling TV"),
        )),
    ),
)
