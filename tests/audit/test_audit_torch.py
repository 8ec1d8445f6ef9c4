"""Done-when: torch's own SDPA backends pass every probe, in bf16, fp16 and fp32 (CPU; CUDA opt-in)."""

import pytest
import torch

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit

pytestmark = pytest.mark.usefixtures("one_thread")


TORCH_2_5 = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


@pytest.mark.slow
@pytest.mark.skipif(not TORCH_2_5, reason="torch < 2.5 returns NaN for fully masked rows and has no enable_gqa")
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("backend", ["torch-sdpa-math", "torch-sdpa-flash"])
def test_torch_backends_pass_every_probe(backend, dtype, device):
    report = run_audit(AuditConfig(target=backend, dtypes=dtype, device=device))
    assert report.available, report.reason
    # The serving probes (merge / decode) need entry points an SDPA kernel does not have, and the feature
    # probes (softcap, window, sinks) a declaration torch's SDPA does not make: unsupported, never asked.
    bad = [(r.name, r.status, r.target_error, r.baseline_error, r.bound, r.note) for r in report.results
           if r.status not in ("pass", "note")
           and not (r.status == "unsupported" and ("entry point" in r.note or "does not declare" in r.note))]
    assert not bad
    # Torch >= 2.5 propagates NaN from masked-out K/V: reported, not failed (fails under --strict).
    notes = {r.name for r in report.results if r.status == "note"}
    assert notes <= {"nonfinite-masked-kv"}


def test_strict_turns_torch_nan_propagation_into_a_failure():
    cfg = AuditConfig(target="torch-sdpa-math", dtypes="fp32", probes="nonfinite-masked-kv", strict=True)
    (row,) = run_audit(cfg).results
    assert row.status == "fail" and "NaN" in row.note


def test_default_dispatch_reports_top_left_alignment():
    (row,) = run_audit(AuditConfig(target="torch-sdpa", dtypes="fp32", probes="causal-alignment")).results
    assert row.status == "pass"
    assert all("top-left" in c.verdict.note for c in row.cases if "x" in c.label and c.label[0] != "7")
