"""The serving probes: attnum's reference passes them, each planted bug fails exactly its probe, SDPA-only
targets get "unsupported", and the real-kernel adapters report "unavailable" without their package."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.nn.functional as F

from attnum.audit.config import AuditConfig
from attnum.audit.probes import PROBES
from attnum.audit.runner import run_audit
from attnum.kernels.registry import KERNELS, kernel_status, resolve
from attnum.kernels.serving import ServingTarget

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SERVING = ("merge-empty-split", "merge-two-empty", "lse-base", "inf-lse-empty-rows", "split-invariance",
           "page-padding-leak", "block-table-past-end", "decode-causal-alignment", "kv-scale-overflow")
ADAPTERS = ("flashinfer-merge", "flashinfer-decode", "flash-attn-kvcache", "vllm-merge")

pytestmark = pytest.mark.usefixtures("one_thread")


def audit(target, probes=None, dtypes="bf16,fp32", fn=None, **kw):
    report = run_audit(AuditConfig(target=target, dtypes=dtypes, probes=probes, **kw), target=fn)
    return {(r.name, r.dtype): r for r in report.results}, report


def test_every_serving_probe_is_in_the_catalogue():
    assert set(SERVING) <= set(PROBES)


@pytest.mark.parametrize("policy", ["fa2", "fp32"])
def test_the_reference_serving_target_passes_every_serving_probe(policy):
    rows, report = audit(f"decode:{policy}", ",".join(SERVING))
    assert report.available and report.passed
    for (name, dtype), row in rows.items():
        allowed = ("pass", "note") if name == "split-invariance" else ("pass",)
        assert row.status in allowed, (name, dtype, row.note)


@pytest.mark.parametrize("example,probe", [("sentinel_merge", "merge-empty-split"),
                                           ("nan_merge", "merge-two-empty"),
                                           ("padding_leak_decode", "page-padding-leak"),
                                           ("fp8_kv_fixed_scale", "kv-scale-overflow")])
def test_each_planted_bug_fails_exactly_its_probe(example, probe):
    rows, report = audit(f"{EXAMPLES}/{example}.py:target", dtypes="bf16", strict=True)
    failed = {name for (name, _), r in rows.items() if not r.passed}
    assert failed == {probe}, {n: rows[(n, "bf16")].note for n in failed}
    assert not report.passed


def test_sdpa_targets_get_unsupported_not_passed_by_accident():
    rows, _ = audit("sdpa", ",".join(SERVING), dtypes="fp32", fn=F.scaled_dot_product_attention)
    assert len(rows) == len(SERVING)
    assert all(r.status == "unsupported" and "entry point" in r.note for r in rows.values())


def test_a_merge_only_target_is_unsupported_by_the_attention_probes():
    from attnum.attention.merge import merge_state

    def merge(o_a, lse_a, o_b, lse_b):
        o, lse = merge_state((o_a, lse_a), (o_b, lse_b))
        return o.to(o_a.dtype), lse

    rows, _ = audit("m", "odd-lengths,merge-two-empty", dtypes="fp32", fn=ServingTarget("m", merge_state=merge))
    assert rows[("odd-lengths", "fp32")].status == "unsupported"
    assert rows[("merge-two-empty", "fp32")].status == "pass"


@pytest.mark.parametrize("name", ADAPTERS)
def test_real_kernel_adapters_are_unavailable_here_with_the_reason(name):
    assert name in KERNELS
    ok, why = kernel_status(name, "cuda")
    target = resolve(name, "cuda")
    if not ok:  # no package or no CUDA: never "passed"
        assert not target.available and target.fn is None and why
        rows, report = audit(name, "merge-two-empty", device="cuda")
        assert not report.available and not report.passed and rows == {}


def test_kv_scale_overflow_catches_nan_and_clamping_in_every_dtype():
    from attnum.kernels.serving import reference

    rows, _ = audit(f"{EXAMPLES}/fp8_kv_fixed_scale.py:target", "kv-scale-overflow", dtypes="bf16,fp16,fp32")
    assert all(r.status == "fail" and "NaN" in r.note for r in rows.values()), {k: r.note for k, r in rows.items()}
    attend = reference("fa2").decode

    def saturating(q, k, v, **kw):  # a saturating FP8 store at scale 1.0: clamps to 448 instead of NaN
        return attend(q, k.clamp(-448, 448), v.clamp(-448, 448), **kw)

    rows, _ = audit("sat", "kv-scale-overflow", dtypes="bf16", fn=ServingTarget("sat", decode=saturating))
    assert rows[("kv-scale-overflow", "bf16")].status == "fail"
