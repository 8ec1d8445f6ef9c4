"""The compare and validate commands end to end, through the installed entry point's main()."""

import json
import subprocess
import sys

import pytest

from attnum.cli import main


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compare_fp64_json_is_exact(capsys):
    code, out, _ = run_cli(capsys, "compare", "--policy", "uniform", "--format", "fp64", "--seq-len", "256",
                           "--json")
    assert code == 0
    result = json.loads(out)
    assert set(result["metrics"]) == {"flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline"}
    for pair in result["metrics"].values():
        assert {"max_abs", "mean_abs", "std_abs", "rmse", "mean_signed", "bias", "rel_mean_abs",
                "row_rel_max_abs"} <= set(pair)
    assert result["metrics"]["flash_vs_golden"]["max_abs"] <= 1e-12
    assert abs(result["metrics"]["flash_vs_golden"]["rel_mean_abs"]) <= 1e-12
    assert result["config"]["seq_len"] == 256 and result["tiles"]["Bc"] == 128


def test_compare_table_and_flags(capsys):
    code, out, _ = run_cli(capsys, "compare", "--policy", "fa2:bf16", "--seq-len", "100", "--kv-len", "300",
                           "--heads", "4", "--kv-heads", "2", "--sram", "4096", "--swap-blocks", "--causal",
                           "--variant", "fa1", "--dist", "outlier", "--kv-order", "reverse")
    assert code == 0 and "flash_vs_golden" in out and "Bc=16" in out


@pytest.mark.parametrize("args,fragment", [
    (["--format", "e0m3"], "format='e0m3'"),
    (["--seq-len", "0"], "seq_len=0"),
    (["--policy", "foo:bf16"], "policy='foo:bf16'"),
    (["--head-dim", "64", "--sram", "-5"], "sram=-5"),
    (["--heads", "8", "--kv-heads", "3"], "kv_heads=3"),
    (["--device", "tpu"], "device='tpu'"),
])
def test_compare_bad_input_one_line_exit_2(capsys, args, fragment):
    code, _, err = run_cli(capsys, "compare", *args)
    assert code == 2
    assert fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_console_script_exit_code_without_traceback():
    res = subprocess.run([sys.executable, "-m", "attnum", "compare", "--variant", "fa9"], capture_output=True,
                         text=True)
    assert res.returncode == 2 and "variant='fa9'" in res.stderr and "Traceback" not in res.stderr


def test_validate_against_torch_cpu_flash(capsys):
    code, out, _ = run_cli(capsys, "validate", "--formats", "bf16,fp32", "--seq-lens", "128,1024", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["kv_tiles"] for r in rows] == [1, 2, 1, 2]
    for r in rows:
        # Both compute in fp32 and round once to the output format, differing only in fp32-level
        # noise (exp approximation, GEMM order): after rounding to bf16 at most one output ULP apart.
        if r["format"] == "bf16":
            assert r["max_ulp"] <= 1, r
        # FlashAttention's acceptance rule, the kernel playing the same-precision baseline.
        assert r["emulation_vs_golden"] <= 2 * r["kernel_vs_golden"], r
    assert min(r["identical"] for r in rows if r["format"] == "bf16") > 0.5


def test_compare_grad_json(capsys):
    code, out, _ = run_cli(capsys, "compare", "--grad", "--policy", "fp64", "--seq-len", "64", "--heads", "2",
                           "--json")
    assert code == 0
    result = json.loads(out)
    for grad in ("dq", "dk", "dv"):
        assert result["metrics"]["flash_vs_golden"][grad]["max_abs"] <= 1e-12


def test_validate_eager_from_the_cli(capsys):
    """`attnum validate --eager`: the torch-eager policy against PyTorch eager attention, in JSON."""
    import json

    from attnum.cli import main

    assert main(["validate", "--eager", "--formats", "bf16", "--seq-lens", "64", "--heads", "1", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["format"] == "bf16" and row["seq_len"] == 64
    assert row["identical"] > row["identical_uniform"]  # the eager model is closer to eager than uniform is
    assert main(["validate", "--eager", "--formats", "e4m3fn"]) == 2
