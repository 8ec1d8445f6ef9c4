"""``attnum audit``: exit codes 0/1/2/3, --json shape, --html, file targets importing siblings."""

import json

import _paths
import pytest
import torch

from attnum.cli import main

EXAMPLES = _paths.EXAMPLES
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


REFUSER = '''
def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    raise NotImplementedError("this kernel takes no input at all")
'''


def test_target_refusing_every_case_exits_3_nothing_tested(tmp_path, capsys):
    path = tmp_path / "refuser.py"
    path.write_text(REFUSER)
    assert main(["audit", f"{path}:attention", "--dtype", "fp32", QUICK]) == 3
    out = capsys.readouterr().out.strip()
    assert "nothing was tested" in out and len(out.splitlines()) == 1 and "PASSED" not in out
    assert main(["audit", f"{path}:attention", "--dtype", "bf16,fp32", QUICK, "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["available"] is False and doc["passed"] is None and "nothing was tested" in doc["reason"]
    assert doc["probes"] and all(p["verdict"] == "unsupported" for p in doc["probes"])


def test_partly_refused_audit_is_still_an_audit(capsys):
    # torch-flex has no CPU backward: the gradient probe is unsupported, the forward one runs.
    rc = main(["audit", "torch-flex", "--dtype", "fp32", "--probes=scale-argument,grad-accuracy", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["available"] is True and doc["passed"] is True
    assert [p["verdict"] for p in doc["probes"]] == ["pass", "unsupported"]


def test_json_reports_margins_and_the_cpu_capability(capsys):
    assert main(["audit", "torch-sdpa-math", "--dtype", "fp32", QUICK, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    env = doc["environment"]
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and env["torch_threads"] >= 1
    for p in doc["probes"]:
        assert p["margin"] == pytest.approx(p["target_error"] / p["bound"]) and 0 <= p["margin"] <= 1
        assert p["near_bound"] is (p["margin"] > 0.8)
        for c in p["cases"]:
            assert c["bound"] >= c["terms_floor"] >= 0 and c["near_bound"] in (True, False)


def test_table_shows_margin_column_and_environment(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["audit", "torch-sdpa-math", "--dtype", "fp32", "--probes=scale-argument"]) == 0
    out = capsys.readouterr().out
    assert "margin" in out and "%" in out
    assert f"CPU capability {torch.backends.cpu.get_cpu_capability()}" in out


def test_pass_above_80_percent_is_flagged_near_bound():
    from attnum.audit.report import verdict_text
    from attnum.audit.runner import ProbeResult

    def row(ratio, status="pass"):
        return ProbeResult(name="p", dtype="fp32", status=status, target_error=ratio, baseline_error=0.4, bound=1.0,
                           note="", seconds=0.0, ratio=ratio)

    assert verdict_text(row(0.87)) == "pass (87%) near bound" and row(0.87).near_bound
    assert verdict_text(row(0.5)) == "pass" and not row(0.5).near_bound
    assert verdict_text(row(1.3, "fail")) == "fail"


def test_assert_attention_close_refuses_a_target_that_tested_nothing():
    from attnum.testing import assert_attention_close

    def refuses(*args, **kwargs):
        raise NotImplementedError("not implemented for this input")

    with pytest.raises(AssertionError, match="tested nothing"):
        assert_attention_close(refuses, dtypes="bf16", probes="odd-lengths")
