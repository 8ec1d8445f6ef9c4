"""`attnum decode` and DecodeConfig: flags 1:1 onto the frozen config, runs end to end, bad input exits 2."""

from __future__ import annotations

import dataclasses
import json

import pytest

from attnum.cli import build_app, main
from attnum.studies.serving.decode import DECODE_FIELDS, DecodeConfig, run_decode

pytestmark = pytest.mark.usefixtures("one_thread")


def run(capsys, *args):
    code = main(["decode", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_flags_map_one_to_one_onto_the_config():
    import typer.main

    cmd = typer.main.get_command(build_app()).commands["decode"]
    flags = {p.name for p in cmd.params} - {"as_json"}
    fields = {f.name for f in dataclasses.fields(DecodeConfig)}
    assert flags == fields == set(DECODE_FIELDS)
    assert {"splits", "page_size", "kv_heads", "lse_base", "kv_cache_dtype", "kv_scale", "mla_rank",
            "absorbed"} <= flags


def test_decode_json_records_every_pair(capsys):
    code, out, _ = run(capsys, "--cache-len", "300", "--splits", "3", "--kv-heads", "2", "--heads", "4",
                       "--head-dim", "32", "--json")
    assert code == 0
    result = json.loads(out)
    assert set(result["metrics"]) == {"decode_vs_golden", "unsplit_vs_golden", "decode_vs_unsplit",
                                      "baseline_vs_golden"}
    assert result["config"]["splits"] == 3 and result["tiles"]["splits"] == 3
    assert result["metrics"]["decode_vs_golden"]["max_ulp"] <= 2  # fa2:bf16: output rounded once, fp32 inside
    assert result["cost"]["flops"] > 0


def test_decode_table_paged_and_quantized(capsys):
    code, out, _ = run(capsys, "--cache-len", "200", "--page-size", "16", "--heads", "2", "--head-dim", "32",
                       "--kv-cache-dtype", "fp8", "--kv-scale", "calibrated")
    assert code == 0 and "paged P=16" in out and "decode_vs_golden" in out and "overflowed" in out


def test_fp64_decode_is_exact_to_float64_and_splits_do_not_matter_there():
    r = run_decode(DecodeConfig(policy="fp64", format="fp64", cache_len=257, splits=5, page_size=16, heads=2,
                                head_dim=16))
    assert r["metrics"]["decode_vs_golden"]["max_abs"] <= 2 * (257 + 20) * 2.0**-53 * 5  # |V| < 5 here
    assert r["metrics"]["decode_vs_unsplit"]["max_abs"] <= 2 * (257 + 20) * 2.0**-53 * 5


def test_fp8_kv_cache_error_dominates_bf16_and_mla_paths_agree():
    bf16 = run_decode(DecodeConfig(cache_len=256, heads=2, head_dim=32))
    fp8 = run_decode(DecodeConfig(cache_len=256, heads=2, head_dim=32, kv_cache_dtype="fp8", kv_scale="calibrated"))
    assert fp8["metrics"]["decode_vs_golden"]["rmse"] > 4 * bf16["metrics"]["decode_vs_golden"]["rmse"]
    mla = run_decode(DecodeConfig(cache_len=128, heads=2, head_dim=32, mla_rank=64, absorbed=True))
    assert set(mla["metrics"]) == {"decode_vs_golden", "other_path_vs_golden", "absorbed_vs_explicit"}
    assert mla["metrics"]["absorbed_vs_explicit"]["max_ulp"] <= 8


@pytest.mark.parametrize("args,param", [
    (["--splits", "0"], "splits=0"), (["--page-size", "0"], "page_size=0"), (["--kv-heads", "3"], "kv_heads=3"),
    (["--lse-base", "10"], "lse_base='10'"), (["--cache-len", "0"], "cache_len=0"),
    (["--causal-alignment", "left"], "causal_alignment='left'"), (["--kv-cache-dtype", "fp4"], "kv_cache_dtype"),
    (["--kv-scale", "0"], "kv_scale='0'"), (["--absorbed"], "absorbed=True"),
    (["--mla-rank", "64", "--page-size", "16"], "page_size=16"), (["--policy", "nope"], "policy"),
])
def test_bad_input_exits_2_with_one_line(capsys, args, param):
    code, _, err = run(capsys, *args)
    assert code == 2 and param in err and err.count("\n") == 1


DECODE_SPEC = """
name = "decode-tiny"
[defaults]
kind = "decode"
heads = 2
head_dim = 16
cache_len = 64
[axes]
splits = [1, 3]
page_size = [16, 64]
"""


def test_decode_axes_in_a_toml_sweep(tmp_path, capsys):
    from attnum.store.db import open_store
    from attnum.sweep.spec import load_spec, spec_from_dict

    path = tmp_path / "spec.toml"
    path.write_text(DECODE_SPEC)
    spec = load_spec(path)
    assert len(spec.planned()) == 4 and all(p.kind == "decode" for p, _ in spec.planned().values())
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--quiet"]) == 0
    with open_store(tmp_path / "out") as store:
        rows = store.rows()
    assert len(rows) == 4 and all(r["metrics"]["decode_vs_golden"]["max_ulp"] <= 2 for r in rows)
    with pytest.raises(Exception, match="splits=2 is not an axis of kind 'compare'"):
        spec_from_dict({"name": "x", "axes": {"splits": [2]}})
    with pytest.raises(Exception, match="splits"):
        spec_from_dict({"name": "x", "axes": {"kind": "decode", "splits": [0]}})
