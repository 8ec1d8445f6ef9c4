"""The probe catalogue, the audit config, and the input constructions the probes rely on."""

import importlib
import pkgutil
from pathlib import Path

import pytest
import torch

import attnum.audit.probes as probes_pkg
from attnum.audit.config import AuditConfig, parse_dtypes
from attnum.audit.construct import logits_qk
from attnum.audit.probes import DEFAULT_PROBES, PROBES, select
from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format

# Every probe the issue asks for, by the name the CLI uses.
REQUIRED = ("below-sentinel", "masked-key-leak", "fully-masked-rows", "causal-alignment", "qk-overflow",
            "exp-overflow", "accumulator-overflow", "scale-argument", "gqa-mapping", "long-sequence", "odd-lengths",
            "additive-mask-overflow", "nonfinite-masked-kv", "determinism", "batch-invariance",
            "grad-fully-masked", "grad-low-lse", "grad-tile-tail", "grad-accuracy")


def test_catalogue_has_every_required_probe_one_module_each():
    assert set(REQUIRED) <= set(PROBES)
    modules = [m.name for m in pkgutil.iter_modules(probes_pkg.__path__)]
    assert len(modules) == len(PROBES)
    for name in modules:
        mod = importlib.import_module(f"attnum.audit.probes.{name}")
        assert mod.PROBE.name in PROBES
        assert mod.PROBE.refs and mod.__doc__
        assert any(ref.split("#")[0].split(" ")[0] in mod.__doc__ for ref in mod.PROBE.refs), name
        assert len(Path(mod.__file__).read_text().splitlines()) <= 300


def test_default_set_is_every_probe_and_select_validates():
    assert DEFAULT_PROBES == tuple(PROBES)
    assert [p.name for p in select("odd-lengths, below-sentinel")] == ["odd-lengths", "below-sentinel"]
    with pytest.raises(AttnumInputError, match="nope"):
        select("below-sentinel,nope")


def test_config_maps_flags_and_validates():
    cfg = AuditConfig(target="torch-sdpa", dtypes="bfloat16,fp32,bf16", probes="determinism")
    assert cfg.dtypes == ("bf16", "fp32") and cfg.probes == ("determinism",)
    for bad in ({"dtypes": "fp8"}, {"device": "tpu"}, {"k": 0.0}, {"floor_ulps": -1.0}, {"empty_rows": "x"}):
        with pytest.raises(AttnumInputError):
            AuditConfig(target="torch-sdpa", **bad)
    with pytest.raises(AttnumInputError):
        parse_dtypes("")


@pytest.mark.parametrize("dtype,fmt", [(torch.bfloat16, "bf16"), (torch.float16, "fp16"), (torch.float32, "fp32")])
@pytest.mark.parametrize("target", [-1e4, -5e4 + 1, -2.45e5, -5.24288e5])
def test_logits_land_at_or_below_the_target_after_rounding(dtype, fmt, target):
    q, k = logits_qk(raw_base=target, n=3, s=5, d=8, dtype=dtype, fmt=get_format(fmt), picks=((0, 2, 100.0),))
    raw = q.double() @ k.double().T
    assert q.dtype == dtype
    assert raw[1:].max() <= target and raw[1:].min() > target - 2.0  # within 2 raw units below
    assert raw[0, 2] == pytest.approx(raw[0, 0] + 100.0)
