"""fla-core 0.6.0's native sparse attention (fla-nsa: parallel_nsa's selected-block branch), run as fetched
(attnum kernels fetch fla) through Triton's interpreter under the faithful model: the block-select probe
(random selections, later blocks listed, -1 padding, GQA, a partial last block) passes except the query that
selects nothing, which is NaN; as SDPA (every block selected) it equals dense causal attention; fla's own
top-k selection picks what float64 picks, and its compression branch is within its derived bound of the
float64 golden over block means. A failed download skips, saying why."""

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


def cases(probes, dtypes="bf16"):
    report = run_audit(AuditConfig(target="fla-nsa", dtypes=dtypes, probes=probes))
    assert report.available, report.reason
    return [(r.name, r.dtype, c.label, c.verdict) for r in report.results for c in r.cases]


def test_block_select_passes_every_selection_and_a_query_selecting_nothing_is_nan(fla):
    got = cases("block-select")
    failed = [(dt, label, v.note) for _, dt, label, v in got if v.status == "fail"]
    assert [(dt, label) for dt, label, _ in failed] == [("bf16", "query 40 selects nothing (all -1): an empty row")]
    assert all("NaN" in note for *_, note in failed)
    assert sum(v.status == "pass" for *_, v in got) == 6


def test_as_sdpa_every_block_selected_is_dense_causal_attention(fla):
    """No selection given: the adapter lists every block (64 keys each), so the branch must be dense causal
    attention: GQA (groups of 1 to 8 real heads, filled to NSA's 16) and bottom-right N < S pass in bf16
    and fp16; what NSA lacks (non-causal, N > S) is unsupported, saying why. fp32 fails by design: its
    tl.dot of fp32 operands is TF32 under the GPU model, far past the fp32 rule."""
    got = cases("gqa-mapping,causal-alignment") + cases("causal-alignment", "fp16,fp32")
    low = [(lab, v) for name, dt, lab, v in got if dt != "fp32"]
    assert {v.status for _, v in low} == {"pass", "unsupported"}, [(lab, v.note) for lab, v in low]
    refused = [v.note for _, v in low if v.status == "unsupported"]
    assert refused and all("causal only" in n or "N=" in n for n in refused)
    assert sum(v.status == "pass" for _, v in low) >= 6
    fp32 = [v for _, dt, _, v in got if dt == "fp32" and v.status != "unsupported"]
    assert fp32 and all(v.status == "fail" and v.target_error > 100 * v.bound for v in fp32), fp32


def test_nsa_topk_selects_what_float64_selects_and_the_branch_follows_it(fla):
    """fla's top-k selection and compression branch (tests/_fla_nsa_topk_check.py, in a child process)."""
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(HERE / "_fla_nsa_topk_check.py")], capture_output=True, text=True,
                         timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert set(got) == {"bfloat16"}
    for dt, r in got.items():
        u = 2.0**-8
        assert r["wrong"] == [] and r["duplicates"] == 0, (dt, r)
        # the branch on the kernel's own selection: a few roundings of max |V| (q * scale, P, the output)
        assert r["finite"] and r["branch_err"] <= 4 * u * r["vmax"], (dt, r)
        # the compression branch against its float64 golden (the bound is derived in the child script);
        # queries before the first complete block get 0
        assert r["cmp_err"] <= r["cmp_bound"] and r["cmp_empty_rows_zero"], (dt, r)
