"""fla-core 0.6.0's parallel_attn (fla-parallel-attn), run as fetched (attnum kernels fetch fla) through
Triton's interpreter: window and sinks declared and audited, refusals are "unsupported", fp32 under the
GPU model is TF32 (fails the fp32 rule; passes with IEEE dots, --numerics raw), varlen rows equal dense.
A failed download skips, saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import _paths
import pytest
from _wheel_helpers import fetched_or_skip

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit

HERE = _paths.TESTS  # the helper scripts


@pytest.fixture(scope="module")
def fla():
    fetched_or_skip("fla")


def rows(dtypes, probes, numerics="faithful"):
    report = run_audit(AuditConfig(target="fla-parallel-attn", dtypes=dtypes, probes=probes, numerics=numerics))
    assert report.available, report.reason
    return {(r.name, r.dtype): r for r in report.results}


def test_window_and_sinks_pass_in_bf16_and_what_fla_lacks_is_unsupported(fla):
    got = rows("bf16", "window-poisoned-keys,attention-sinks")
    for name in ("window-poisoned-keys", "attention-sinks"):
        r = got[(name, "bf16")]
        assert r.status == "pass", r.note
        refused = [c for c in r.cases if c.verdict.status == "unsupported"]
        passed = [c for c in r.cases if c.verdict.status == "pass"]
        assert refused and len(passed) >= 3
        # only the non-causal and N != S cases are refused, each saying why
        assert all("causal only" in c.verdict.note or "N == S" in c.verdict.note for c in refused)


def test_fp32_is_tf32_under_the_gpu_model_and_ieee_dots_pass(fla):
    faithful = rows("fp32", "gqa-mapping")[("gqa-mapping", "fp32")]
    raw = rows("fp32", "gqa-mapping", numerics="raw")[("gqa-mapping", "fp32")]
    assert faithful.status == "fail" and faithful.target_error > 100 * faithful.bound, faithful.note
    assert raw.status == "pass", raw.note


def test_varlen_with_a_zero_length_sequence_equals_dense_per_sequence(fla):
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(HERE / "_fla_varlen_check.py")], capture_output=True, text=True,
                         timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    for dt, r in got.items():
        assert r["finite"] and r["bitwise_dense"] == [True, True, True], (dt, r)


def test_fla_decode_passes_the_decode_probes_in_bf16_and_refuses_what_it_lacks(fla):
    """fla-decode (attn_decoding_one_step through the decode entry point, packed varlen): every decode probe
    case it can run passes in bf16, the empty sequence included; the LSE and N > 1 cases are unsupported."""
    report = run_audit(AuditConfig(target="fla-decode", dtypes="bf16",
                                   probes="empty-sequence,page-padding-leak,split-invariance,lse-base"))
    assert report.available, report.reason
    got = {r.name: r for r in report.results}
    for name in ("empty-sequence", "page-padding-leak", "split-invariance"):
        assert got[name].status == "pass", (name, got[name].note)
        assert sum(c.verdict.status == "pass" for c in got[name].cases) >= 2
    assert got["lse-base"].status == "unsupported" and "no LSE" in got["lse-base"].note
