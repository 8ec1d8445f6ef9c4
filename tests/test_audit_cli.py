"""``attnum audit``: exit codes 0/1/2/3, --json shape, --html, file targets importing siblings."""

import json
from pathlib import Path

import pytest
import torch

from attnum.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
QUICK = "--probes=scale-argument,fully-masked-rows"


pytestmark = pytest.mark.usefixtures("one_thread")


def test_json_document_shape_and_exit_0(capsys):
    assert main(["audit", "torch-sdpa-math", "--dtype", "fp32", QUICK, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "torch-sdpa-math" and doc["passed"] is True
    assert [p["name"] for p in doc["probes"]] == ["scale-argument", "fully-masked-rows"]
    for p in doc["probes"]:
        assert {"name", "dtype", "passed", "target_error", "baseline_error", "bound", "note"} <= set(p)
        assert p["dtype"] == "fp32" and p["passed"] is True and p["bound"] >= p["target_error"]


def test_failing_example_exits_1_and_writes_html(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    page = tmp_path / "audit.html"
    # sentinel_attention.py imports its sibling kernel_utils.py: the folder goes on sys.path.
    rc = main(["audit", f"{EXAMPLES}/sentinel_attention.py:attention", "--dtype", "bf16",
               "--probes", "below-sentinel", "--html", str(page)])
    out = capsys.readouterr().out
    assert rc == 1 and "below-sentinel" in out and "fail" in out
    assert "below-sentinel" in page.read_text() and "<table>" in page.read_text()


@pytest.mark.parametrize("target,message", [
    ("no_such_module_xyz:attention", "cannot import module"),
    (f"{EXAMPLES}/sentinel_attention.py:nope", "has no attribute"),
    (f"{EXAMPLES}/wrong_signature.py:attention", "does not follow scaled_dot_product_attention"),
    (f"{EXAMPLES}/missing_file.py:attention", "does not exist"),
    ("torch.nn.functional:dropout_not_there", "has no attribute"),
    ("torch:float32", "not a callable"),
    ("no-such-builtin", "expected a built-in"),
])
def test_usage_errors_exit_2_with_one_line(target, message, capsys):
    assert main(["audit", target, "--dtype", "fp32", QUICK]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("flag", [["--dtype", "fp8"], ["--device", "tpu"], ["--probes", "nope"], ["--k", "0"],
                                  ["--empty-rows", "maybe"]])
def test_bad_flags_exit_2(flag, capsys):
    assert main(["audit", "torch-sdpa", *flag]) == 2


@pytest.mark.parametrize("target", ["flash-attn", "flashinfer", "torch-sdpa-efficient"])
def test_unavailable_builtin_exits_3_not_1(target, capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA present: these may be available")
    assert main(["audit", target, "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["available"] is False and doc["passed"] is None and doc["probes"] == [] and doc["reason"]


def test_list_probes(capsys):
    assert main(["audit", "torch-sdpa", "--list"]) == 0
    assert "below-sentinel" in capsys.readouterr().out
