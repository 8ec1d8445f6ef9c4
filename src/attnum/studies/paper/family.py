"""The paper family in the registry: kinds ``compare``, ``attribute``, ``kernels``; findings, report, profiles."""

from __future__ import annotations

from attnum.studies.paper.compare import FIELDS
from attnum.studies.paper.point import COMPARISONS, Point
from attnum.studies.paper.profiles import PROFILES, paper_spec
from attnum.studies.paper.report.findings import compute_findings, compute_maps
from attnum.studies.paper.report.headline import paper_headline, paper_in_short
from attnum.studies.paper.report.section import report
from attnum.studies.paper.run import run_attribute_point, run_compare_point, run_kernels_point
from attnum.sweep.registry import Family, StudyKind

# What the generic per-group figures draw for compare rows (groups the paper's own figures do not draw).
METRICS = (
    ("flash_vs_golden.max_abs", "max |flash - golden|"),
    ("baseline_vs_golden.max_abs", "max |baseline - golden|"),
    ("flash_vs_baseline.rel_max_abs", "max |flash - baseline| / mean |O|"),
    ("ratio.max_abs", "flash / baseline error vs golden"),
)

def _headline(maps: list) -> list[str]:
    """What ``reproduce`` prints first: the plain "In short" sentence, then the detailed paragraph."""
    short = paper_in_short(maps)
    return [short, *paper_headline(maps)] if short else []


FAMILY = Family(
    name="paper",
    order=0,
    kinds=(
        StudyKind(name="compare", point_type=Point, run=run_compare_point, axes=FIELDS,
                  from_config=Point.from_config, metrics=METRICS),
        StudyKind(name="attribute", point_type=Point, run=run_attribute_point, from_config=Point.from_config),
        # kernel points follow from compare points and the spec's ``record``; a spec never names them
        StudyKind(name="kernels", point_type=Point, run=run_kernels_point, from_config=Point.from_config,
                  in_specs=False),
    ),
    findings=compute_findings,
    headline=lambda rows: _headline(compute_maps(rows)),
    report=report,
    profiles=dict.fromkeys(PROFILES, paper_spec),
    record=COMPARISONS,
)
