"""The FA3 FP8 table: the function's rows and the `attnum fp8-table` command."""

import json

import pytest

from attnum.attention import golden_attention
from attnum.attention.lowbit.quant import fp8_attention, fp8_baseline_attention
from attnum.cli import main
from attnum.numerics.metrics import deviation
from attnum.studies.serving.fp8_table import SETTINGS, FP8TableConfig, run_fp8_table
from attnum.workloads.inputs import InputSpec, make_qkv

SMALL = dict(seq_len=96, heads=1, head_dim=32, block=32)


def test_rows_are_the_deviation_of_each_setting_from_golden():
    rows = run_fp8_table(FP8TableConfig(**SMALL))
    assert [r["key"] for r in rows] == [s[0] for s in SETTINGS]
    by = {r["key"]: r for r in rows}
    q, k, v = make_qkv(InputSpec(heads=1, seq_len=96, head_dim=32, dist="outlier", seed=0))
    gold = golden_attention(q, k, v)
    assert by["fa3-fp8"]["rmse"] == deviation(fp8_attention(q, k, v, block=32), gold)["rmse"]
    assert by["baseline-fp8"]["rmse"] == deviation(fp8_baseline_attention(q, k, v), gold)["rmse"]
    assert by["fa3-fp16"]["rmse"] == by["fa2-fp16"]["rmse"]
    assert by["baseline-fp8"]["paper_rmse"] == 2.4e-2 and by["fa3-fp8"]["paper_rmse"] == 9.1e-3
    assert by["fa3-fp8"]["ratio_to_fa3_fp8"] == 1.0
    assert by["baseline-fp8"]["paper_ratio_to_fa3_fp8"] == pytest.approx(2.4e-2 / 9.1e-3, rel=1e-15)


def test_cli_json_and_table(capsys):
    assert main(["fp8-table", "--seq-len", "64", "--heads", "1", "--head-dim", "32", "--block", "32", "--no-fp16",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["seq_len"] == 64 and len(out["rows"]) == len(SETTINGS) - 3
    assert main(["fp8-table", "--seq-len", "64", "--heads", "1", "--head-dim", "32", "--block", "32"]) == 0
    assert "Baseline FP8" in capsys.readouterr().out


def test_cli_mla_table(capsys):
    assert main(["fp8-table", "--mla", "--mla-kv-len", "16", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["path"] for r in rows} == {"explicit", "absorbed"} and rows[2]["cache_bytes_per_token"] == 656


@pytest.mark.parametrize("args,fragment", [(["--head-dim", "48"], "head_dim=48"), (["--format", "int8"], "fmt="),
                                           (["--seq-len", "0"], "seq_len=0"), (["--block", "0"], "block=0")])
def test_cli_bad_input_exits_2(args, fragment, capsys):
    assert main(["fp8-table", *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
