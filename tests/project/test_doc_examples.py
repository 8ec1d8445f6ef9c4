"""The example files docs/audit.md audits do what the docs show (slow: Triton's interpreter, HF's code).

- examples/triton_tutorial/tutorial_slack.py: the tutorial-style kernel without bounds masks, with spare
  storage after every tensor: every odd-lengths case reads past the end of Q (its blocks are 64 rows and
  no length there is a multiple of 64), which attnum's address check reports as ``out of bounds`` -- the
  spare storage behind a view is not the view's.
- examples/hf_attention.py: HF's eager attention forms Q K^T in fp16 before the scale: qk-overflow NaN
  in fp16; its causal mask is bottom-right, as declared.
"""

from __future__ import annotations

import importlib.util

import _paths
import pytest

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit

EXAMPLES = _paths.EXAMPLES


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton extra")
def test_tutorial_kernel_with_spare_storage_reads_past_q_at_ragged_lengths():
    target = f"triton-interpret:{EXAMPLES}/triton_tutorial/tutorial_slack.py:sdpa"
    report = run_audit(AuditConfig(target=target, dtypes="fp16", probes="odd-lengths"))
    (row,) = report.results
    assert row.status == "out of bounds", row.note
    assert row.note.startswith("N=S=1: kernel _attn_fwd read past the end of Q by 3968 elements"), row.note
    assert {c.verdict.status for c in row.cases} == {"out of bounds"}


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_hf_eager_overflows_in_fp16_and_is_bottom_right():
    report = run_audit(AuditConfig(target=f"{EXAMPLES}/hf_attention.py:eager_attention", dtypes="fp16",
                                   probes="qk-overflow,causal-alignment"))
    rows = {r.name: r for r in report.results}
    assert rows["qk-overflow"].status == "fail" and "NaN" in rows["qk-overflow"].note
    assert rows["causal-alignment"].status == "pass" and "bottom-right" in rows["causal-alignment"].note
