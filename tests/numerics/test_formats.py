"""FloatFormat: derived constants against independent sources, parsing and bad names."""

import dataclasses

import pytest
import torch
from _oracle import finite_values

from attnum.errors import AttnumInputError
from attnum.numerics.formats import PRESETS, FloatFormat, get_format

TORCH_FINFO = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
               "e5m2": torch.float8_e5m2, "e4m3fn": torch.float8_e4m3fn}


@pytest.mark.parametrize("name", sorted(TORCH_FINFO))
def test_constants_match_torch_finfo(name):
    fmt, fi = get_format(name), torch.finfo(TORCH_FINFO[name])
    assert (fmt.max, fmt.tiny, fmt.eps, fmt.smallest_subnormal) == (fi.max, fi.tiny, fi.eps, fi.smallest_normal * fi.eps)
    assert fmt.bits == fi.bits


@pytest.mark.parametrize("name", [n for n in PRESETS if PRESETS[n].bits <= 16])
def test_constants_match_enumerated_codes(name):
    fmt = get_format(name)
    vals = finite_values(fmt)
    assert vals.max() == fmt.max
    assert vals[1] == fmt.smallest_subnormal
    assert vals[vals >= 1][1] - 1 == fmt.eps


def test_ocp_maxima():
    assert [get_format(n).max for n in ("e4m3fn", "e3m2fn", "e2m3fn", "e2m1fn")] == [448.0, 28.0, 7.5, 6.0]
    assert get_format("tf32").eps == 2.0**-10


def test_exmy_names_and_aliases():
    f = get_format("e6m9")
    assert (f.ebits, f.mbits, f.specials, f.subnormals) == (6, 9, "ieee", True)
    assert get_format("e8m7") == get_format("bf16") == get_format("bfloat16")
    assert get_format("e11m52") == get_format("fp64")
    assert not get_format("bf16-nosub").subnormals
    assert get_format("bf16-nosub").smallest_subnormal == get_format("bf16").tiny


@pytest.mark.parametrize("bad", ["e0m3", "e12m3", "e5m0", "e11m53", "fp128", "", "bf17", "e3m2x"])
def test_bad_names_name_the_value(bad):
    with pytest.raises(AttnumInputError, match="format="):
        get_format(bad)


def test_frozen_and_validated():
    with pytest.raises(AttnumInputError, match="ebits=1"):
        FloatFormat(ebits=1, mbits=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        PRESETS["bf16"].mbits = 8
