"""Recall that belongs to the probes: kernels attnum has never seen, written as a user writes them (files under
tests/audit/recall/, no attnum import, declared through the plain ``path.py:NAME`` protocol), each broken the way
an upstream bug of the corpus was, each caught by the probe that names its symptom; each fixed twin passes that
probe. Before issue 40's change the softcap kernel (a plain class) was never asked (its declaration was dropped), the
window kernel's V outside the window and the paged kernel's non-causal page tail were never poisoned: both
passed."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit

pytestmark = pytest.mark.usefixtures("one_thread")

RECALL = Path(__file__).parent / "recall"

# (file, probe naming the symptom, what its failing cases say, dtypes) -- the upstream bug each one repeats
CASES = [
    ("softcap_exp", "softcap-overflow", "NaN", "fp32,bf16"),  # vllm#56578
    ("window_v", "window-poisoned-keys", "NaN in V", "bf16"),  # vllm PR #30887
    ("paged_tail", "page-padding-leak", "not causal", "bf16"),  # vllm PR #47305
    ("merge_empty", "merge-two-empty", "NaN", "fp32"),  # flashinfer#4051, vllm before 0.26
    ("decode_zero", "empty-sequence", "NaN", "fp32"),  # vllm#57017
]


def audit(name: str, twin: str, probe: str, dtypes: str):
    report = run_audit(AuditConfig(target=f"{RECALL / name}.py:{twin}", probes=probe, dtypes=dtypes,
                                   isolate=False))
    return report.results


@pytest.mark.parametrize("name,probe,symptom,dtypes", CASES, ids=[c[0] for c in CASES])
def test_the_broken_kernel_is_caught_by_the_probe_that_names_its_symptom(name, probe, symptom, dtypes):
    for row in audit(name, "broken", probe, dtypes):
        assert row.status == "fail", (row.dtype, row.note)
        failing = [c for c in row.cases if c.verdict.status == "fail"]
        assert failing and all("NaN" in c.verdict.note for c in failing), [(c.label, c.verdict.note)
                                                                           for c in failing]
        assert any(symptom in c.label or symptom in c.verdict.note for c in failing), [c.label for c in failing]


@pytest.mark.parametrize("name,probe,symptom,dtypes", CASES, ids=[c[0] for c in CASES])
def test_the_fixed_twin_passes_it(name, probe, symptom, dtypes):
    for row in audit(name, "fixed", probe, dtypes):
        assert row.status == "pass", (row.dtype, row.note)
        assert sum(c.verdict.status == "pass" for c in row.cases) >= 2


def test_the_paged_kernel_fails_only_where_it_reads_the_tail():
    """Causal calls and single queries bound the loop by seq_len: only the N = 5 non-causal cases fail."""
    row = audit("paged_tail", "broken", "page-padding-leak", "bf16")[0]
    failed = {c.label for c in row.cases if c.verdict.status == "fail"}
    assert failed and all("not causal" in label for label in failed), failed
    assert all(c.verdict.status == "pass" for c in row.cases if "not causal" not in c.label)
