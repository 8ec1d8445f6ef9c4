"""The registry of study families: every kind round-trips through its stored config, names are unique,
and the sweep spec takes its kinds and axes from it."""

from __future__ import annotations

import dataclasses

import pytest

from attnum.errors import AttnumInputError
from attnum.studies import FAMILIES
from attnum.sweep.registry import families, get_kind, kinds, point_from_config, spec_kinds


def test_every_family_is_registered_under_its_name():
    assert tuple(f.name for f in families()) == FAMILIES


@pytest.mark.parametrize("name", list(kinds()))
def test_a_default_point_of_each_kind_round_trips_through_its_config(name):
    kind = get_kind(name)
    fields = {f.name: f for f in dataclasses.fields(kind.point_type)}
    point = kind.point_type(kind=name) if fields["kind"].default != name else kind.point_type()
    again = point_from_config(point.config())
    assert again == point and again.key == point.key and point.config()["kind"] == name
    assert set(kind.axes) <= set(kind.fields())


def test_unknown_kinds_fail_naming_the_known_ones():
    with pytest.raises(AttnumInputError, match="kind='nope' is not allowed; expected one of .*'compare'.*'spec'"):
        get_kind("nope")


def test_a_spec_takes_the_registered_kinds_and_no_other():
    from attnum.sweep.spec import spec_from_dict

    assert "kernels" not in spec_kinds() and set(spec_kinds()) | {"kernels", "bug-case"} == set(kinds())
    assert "bug-case" not in spec_kinds()  # a corpus run's point (attnum bugs run), not a sweep axis
    spec = spec_from_dict({"axes": {"kind": "fp8-table", "seq_len": 16, "heads": 1, "head_dim": 8}})
    (point,) = spec.groups[0].points
    assert point.config()["kind"] == "fp8-table"
    with pytest.raises(AttnumInputError, match=r"axes.kind='kernels' is not allowed"):
        spec_from_dict({"axes": {"kind": "kernels"}})
    with pytest.raises(AttnumInputError, match="vocab=4 is not an axis of kind 'ring'"):
        spec_from_dict({"axes": {"kind": "ring", "vocab": 4}})
