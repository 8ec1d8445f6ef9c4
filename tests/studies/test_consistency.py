"""The consistency study: invariance measured (not assumed), the knob named, tokens counted, the cost of
invariance, the decode-batch-invariance probe, and the CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnum.attention.cost.model import DEVICES, CostConfig, attention_cost, split_decode_time
from attnum.attention.serving.decode import decode_attention
from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.cli import main
from attnum.kernels.serving import ServingTarget
from attnum.studies.consistency.config import ConsistencyConfig
from attnum.studies.consistency.run import run_consistency
from attnum.studies.consistency.tokens import TokensConfig, run_tokens

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(length=320, first_position=270, positions=2, heads=4, kv_heads=2, head_dim=64,
             rules=("fa2", "flashinfer:128", "vllm"), batch_sizes=(1, 8, 200), mixes=1, chunk_sizes=(64,),
             page_sizes=(16,), co_len_min=16, co_len_max=512)


@pytest.fixture(scope="module")
def study():
    return run_consistency(ConsistencyConfig(**SMALL))


def test_fixed_size_rules_measure_invariant_and_the_batch_dependent_ones_name_their_knob(study):
    rules = {r["rule"]: r for r in study["rules"]}
    inv = rules["flashinfer:128"]
    assert all(b["identical"] == 1.0 and b["max_ulp"] == 0.0 for b in inv["batches"]) and inv["breaks"] == []
    # fa2: 200 sequences fill the SMs (one split) while alone it splits; vLLM: 200 > 128 // 2 -> 2D.
    for name in ("fa2:sms=132", "vllm"):
        r = rules[name]
        assert "batch_size" in r["breaks"]
        assert r["batches"][0]["identical"] == 1.0  # B = 1 is the request alone
        big = r["batches"][-1]
        assert big["B"] == 200 and big["identical"] < 1.0 and big["max_ulp"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_the_study_runs_on_cuda_with_the_same_invariance():
    r = run_consistency(ConsistencyConfig(**{**SMALL, "device": "cuda"}))
    rules = {x["rule"]: x for x in r["rules"]}
    assert rules["flashinfer:128"]["breaks"] == [] and "batch_size" in rules["vllm"]["breaks"]


def test_every_way_is_judged_against_golden_by_flash_attentions_rule(study):
    # FlashAttention's test rule: within 2x a same-precision plain attention's error (vs float64) plus a
    # floor of 2 ulps (attnum.audit.verdict), all in ulps of bf16 at the row's scale.
    bound = 2 * study["baseline_vs_golden_ulp"] + 2
    assert all(r["alone_vs_golden_ulp"] <= bound for r in study["rules"]), (bound, study["rules"])
    assert all(m["vs_golden_ulp"] <= bound for m in study["modes"])
    assert study["modes"][0]["mode"] == "prefill" and study["modes"][0]["vs_prefill"]["identical"] == 1.0


def test_split_decode_time_is_the_roofline_when_the_sms_are_full_and_slower_when_not():
    dev = DEVICES["H100"]
    full = CostConfig(batch=132, heads=8, kv_heads=1, kv_len=4096)
    assert split_decode_time(full, dev, [1] * 132) == attention_cost(full).time(dev)
    one = CostConfig(batch=1, heads=8, kv_heads=1, kv_len=4096)
    # 1 CTA of 132 SMs streams 1/132 of the bandwidth (memory-bound decode)
    assert math.isclose(split_decode_time(one, dev, [1]), attention_cost(one).total_bytes * 132 / dev.bandwidth)
    extra = 2 * 4 * 8 * (128 + 1) * 4  # 4 splits: fp32 O (d) and LSE per head and split, written and read
    expect = (attention_cost(one).total_bytes + extra) * 132 / 4 / dev.bandwidth
    assert math.isclose(split_decode_time(one, dev, [4]), expect)


def _emulated(rule, claim):
    def decode(q, k, v, *, cache_seqlens, block_table=None, num_splits=1, max_seqlen=None, is_causal=True, scale=None,
               return_lse=False):
        o, lse = decode_attention(q, k, v, cache_seqlens=cache_seqlens, policy="fa2:bf16", split_rule=rule, scale=scale,
                                  is_causal=is_causal, return_lse=True)
        return (o.to(q.dtype), lse.float()) if return_lse else o.to(q.dtype)

    if claim:
        decode.attnum_batch_invariant = True
    return ServingTarget(f"emulated-{rule}", decode=decode)


@pytest.mark.parametrize("rule,claim,status", [("fa2", False, "note"), ("fa2", True, "fail"),
                                               ("flashinfer:256", True, "pass")])
def test_the_probe_fails_a_claimed_invariance_that_does_not_hold(rule, claim, status):
    report = run_audit(AuditConfig(target="t", dtypes="bf16", probes="decode-batch-invariance"),
                       target=_emulated(rule, claim))
    (row,) = report.results
    assert row.status == status, row.note
    if status != "pass":
        assert "changes by" in row.note


def test_tokens_count_unique_completions_and_the_invariant_schedule_never_varies(tmp_path):
    cfg = TokensConfig(formats=("bf16",), prompts=2, runs=2, prompt_len=8, gen_len=6, seq_len=16, train_steps=3,
                       max_batch=160)
    r = run_tokens(cfg, tmp_path)
    assert list(tmp_path.glob("lm-*.pt")) and r["model"]["cached"] is False
    by = {x["schedule"]: x for x in r["results"]}
    assert by["batch-invariant"]["unique_per_prompt"] == [1, 1]
    assert set(by["batch-variant"]["plans"]) == {"2D kernel", "3D kernel, 16 segments"}
    for x in r["results"]:
        assert 0.0 <= x["kl_mean"] <= x["kl_max"] < math.inf and x["max_abs_dlogp"] < math.inf
    assert run_tokens(cfg, tmp_path)["model"]["cached"] is True


def test_cli_runs_and_writes_json(tmp_path, capsys):
    rc = main(["consistency", "--length", "300", "--first-position", "290", "--positions", "1", "--rules",
               "vllm;sglang-fixed:256", "--batch-sizes", "1,100", "--mixes", "1", "--chunk-sizes", "64",
               "--page-sizes", "16", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "knob that breaks it" in out and "Cost of invariance" in out
    data = json.loads((tmp_path / "consistency.json").read_text())
    assert [r["rule"] for r in data["study"]["rules"]] == ["vllm", "sglang-fixed:256"]


@pytest.mark.parametrize("args,name", [(["--rules", "nope"], "split_rule"), (["--batch-sizes", "0"], "batch_sizes")])
def test_cli_bad_input_is_one_line_and_exit_2(args, name, capsys):
    assert main(["consistency", *args]) == 2
    err = capsys.readouterr().err
    assert name in err and len(err.strip().splitlines()) == 1


def test_the_report_section_holds_every_rule_and_way(study):
    from attnum.studies.consistency.report import html_section

    page = html_section(study)
    assert page.count("<table>") == 2 and all(r["rule"] in page for r in study["rules"])
    assert all(m["mode"] in page for m in study["modes"])


SPEC = """
name = "consistency-tiny"
[defaults]
kind = "consistency"
length = 320
first_position = 270
positions = 2
heads = 4
kv_heads = 2
head_dim = 64
rules = "vllm;flashinfer:128"
batch_sizes = [1, 100]
mixes = 1
chunk_sizes = [64]
page_sizes = [16]
[axes]
seed = [0]
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """``attnum sweep`` of a tiny consistency spec, then ``attnum report``: the output folder."""
    tmp = tmp_path_factory.mktemp("consistency-sweep")
    spec = tmp / "spec.toml"
    spec.write_text(SPEC)
    out = tmp / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--jobs", "1"]) == 0
    assert main(["report", str(out)]) == 0
    return out


def test_a_consistency_sweep_is_stored_judged_and_reported(swept):
    from attnum.store.db import open_store
    from attnum.sweep.registry import all_findings

    page = (swept / "report.html").read_text()
    assert 'id="consistency-0"' in page and "knob that breaks it" in page
    with open_store(swept) as store:
        rows = store.rows(status=None)
    verdicts = {f.variant: f.verdict for f in all_findings(rows) if f.figure == "consistency"}
    assert verdicts == {"vllm": "does not hold", "flashinfer:128": "holds"}


def test_the_consistency_report_renders_in_a_browser(swept, tmp_path):
    from test_report_chromium import BROWSER, render

    if BROWSER is None:
        pytest.skip("no headless browser found (apt-get install -y chromium)")
    dom, console = render(swept / "report.html", tmp_path / "profile")
    assert console == []
    assert 'id="consistency-0"' in dom and dom.count("<table") >= 3


def test_every_config_field_is_a_flag():
    # torchtitan-style: the CLI surface is the configs' fields, 1:1 (kind aside).
    import dataclasses

    from typer.main import get_command

    from attnum.cli import build_app

    commands = get_command(build_app()).commands
    for name, cfg in (("consistency", ConsistencyConfig), ("consistency-tokens", TokensConfig)):
        flags = {p.name for p in commands[name].params} - {"out", "as_json"}
        assert flags == {f.name for f in dataclasses.fields(cfg)} - {"kind"}, name
