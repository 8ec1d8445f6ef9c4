"""Strict JSON: NaN/inf become null with a reason; everything else is unchanged."""

import json
import math

import pytest

from attnum.store.jsonout import dumps, strict


def test_nonfinite_become_null_with_reason():
    doc = {"a": 1.5, "b": math.nan, "c": -math.inf, "d": [1.0, math.nan, math.inf, 2.0],
           "e": {"x": math.inf, "y": "s"}, "f": [{"z": math.nan}], "g": None}
    out = json.loads(dumps(doc))
    assert out["a"] == 1.5 and out["b"] is None and out["c"] is None and out["g"] is None
    assert out["d"] == [1.0, None, None, 2.0]
    assert out["nonfinite"] == {"b": "nan", "c": "-inf", "d": "nan at [1]; inf at [2]"}
    assert out["e"] == {"x": None, "y": "s", "nonfinite": {"x": "inf"}}
    assert out["f"] == [{"z": None, "nonfinite": {"z": "nan"}}]


def test_finite_document_is_unchanged():
    doc = {"a": [1, 2.5, "x"], "b": {"c": True}, "n": 0.0}
    assert strict(doc) == doc
    assert json.loads(dumps(doc)) == doc


def test_plain_json_would_not_parse_strictly():
    # The reason this module exists: json.dumps writes NaN, which strict parsers refuse.
    text = json.dumps({"x": math.nan})
    with pytest.raises(ValueError):
        json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert "NaN" not in dumps({"x": math.nan})
