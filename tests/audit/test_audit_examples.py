"""Each example buggy kernel fails the probe that names its bug; kernels that raise or refuse."""

import math

import _paths
import pytest
import torch
import torch.nn.functional as F

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit

EXAMPLES = _paths.EXAMPLES


pytestmark = pytest.mark.usefixtures("one_thread")


def audit(target, probes, dtypes="fp32", fn=None, **kw):
    report = run_audit(AuditConfig(target=target, dtypes=dtypes, probes=probes, **kw), target=fn)
    return {(r.name, r.dtype): r for r in report.results}, report


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_sentinel_kernel_fails_below_sentinel_and_leak(dtype):
    rows, report = audit(f"{EXAMPLES}/sentinel_attention.py:attention", "below-sentinel,masked-key-leak,odd-lengths",
                         dtype)
    assert rows[("below-sentinel", dtype)].status == "fail"
    assert rows[("masked-key-leak", dtype)].status == "fail"
    assert rows[("odd-lengths", dtype)].status == "pass"  # random inputs: the bug is silent
    assert not report.passed
    fail = [c for c in rows[("below-sentinel", dtype)].cases if c.verdict.status == "fail"]
    assert fail and all(c.verdict.target_error > 10 * c.verdict.bound for c in fail)


def test_nan_softmax_kernel_fails_fully_masked_rows_forward_and_backward():
    rows, _ = audit(f"{EXAMPLES}/nan_softmax_attention.py:attention",
                    "fully-masked-rows,grad-fully-masked,scale-argument,gqa-mapping", "bf16")
    assert rows[("fully-masked-rows", "bf16")].status == "fail"
    assert "NaN" in rows[("fully-masked-rows", "bf16")].note
    assert rows[("grad-fully-masked", "bf16")].status == "fail"
    assert rows[("scale-argument", "bf16")].status == "pass"
    assert rows[("gqa-mapping", "bf16")].status == "unsupported"  # it takes no enable_gqa


def test_kernel_that_raises_is_an_error_and_the_audit_goes_on():
    def boom(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if is_causal:
            raise RuntimeError("kaboom")
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)

    rows, report = audit("boom", "odd-lengths,scale-argument", fn=boom)
    odd = rows[("odd-lengths", "fp32")]
    assert odd.status == "error" and "kaboom" in odd.note and math.isnan(odd.target_error)
    assert rows[("scale-argument", "fp32")].status == "error"
    assert not report.passed


def test_kernel_ignoring_scale_fails_scale_probe():
    def no_scale(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=enable_gqa)

    rows, _ = audit("no_scale", "scale-argument", fn=no_scale)
    assert rows[("scale-argument", "fp32")].status == "fail"


def _bottom_right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, shift=0):
    n, s = q.shape[-2], k.shape[-2]
    if is_causal:
        attn_mask = torch.ones(n, s, dtype=torch.bool).tril(diagonal=s - n + shift)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)


def test_causal_alignment_reports_bottom_right_and_fails_an_off_by_one():
    # Declared bottom-right: a pass, noted; undeclared (SDPA's top-left): a failure naming the fix.
    rows, _ = audit("br", "causal-alignment", fn=_bottom_right, causal_alignment="bottom-right")
    row = rows[("causal-alignment", "fp32")]
    assert row.status == "pass" and any("bottom-right as declared" in c.verdict.note for c in row.cases)
    rows, _ = audit("br", "causal-alignment", fn=_bottom_right)
    row = rows[("causal-alignment", "fp32")]
    assert row.status == "fail" and "but top-left is declared" in row.note
    rows, _ = audit("shifted", "causal-alignment", fn=lambda *a, **kw: _bottom_right(*a, shift=1, **kw),
                    causal_alignment="bottom_right")
    assert rows[("causal-alignment", "fp32")].status == "fail"
    assert "neither" in rows[("causal-alignment", "fp32")].note


def test_wrong_gqa_head_mapping_fails():
    def modulo_heads(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        h, g = q.shape[1], k.shape[1]
        idx = torch.arange(h) % g  # wrong: torch maps head i to i // (h // g)
        return F.scaled_dot_product_attention(q, k[:, idx], v[:, idx], attn_mask=attn_mask, is_causal=is_causal,
                                              scale=scale)

    rows, _ = audit("modulo", "gqa-mapping", fn=modulo_heads)
    assert rows[("gqa-mapping", "fp32")].status == "fail"


def test_empty_rows_nan_convention_flips_the_verdicts():
    """Declaring "nan" for empty rows: the NaN kernel's empty rows now pass, torch's zeros fail."""
    rows, _ = audit(f"{EXAMPLES}/nan_softmax_attention.py:attention", "fully-masked-rows", empty_rows="nan")
    cases = {c.label: c.verdict.status for c in rows[("fully-masked-rows", "fp32")].cases}
    assert cases["bool mask, all-False rows"] == "pass" and cases["left padding x causal"] == "pass"
    rows, _ = audit("sdpa", "fully-masked-rows", fn=F.scaled_dot_product_attention, empty_rows="nan")
    row = rows[("fully-masked-rows", "fp32")]
    assert row.status == "fail" and "declared NaN" in row.note  # torch >= 2.5 returns zeros


def test_fp16_scores_kernel_fails_qk_overflow_only_in_fp16():
    rows, _ = audit(f"{EXAMPLES}/fp16_scores_attention.py:attention", "qk-overflow", "bf16,fp16,fp32")
    assert rows[("qk-overflow", "fp16")].status == "fail" and "NaN" in rows[("qk-overflow", "fp16")].note
    assert rows[("qk-overflow", "bf16")].status == "pass" and rows[("qk-overflow", "fp32")].status == "pass"


# Every probe row (name:dtype) each example fails across the whole default audit, measured on HEAD
# before the per-element terms floor and unchanged by it: the floor admits no bug.
EXAMPLE_FAILURES = {
    "sentinel_attention": {"additive-mask-overflow:bf16", "additive-mask-overflow:fp32", "below-sentinel:bf16",
                           "below-sentinel:fp16", "below-sentinel:fp32", "fully-masked-rows:bf16",
                           "fully-masked-rows:fp32", "masked-key-leak:bf16", "masked-key-leak:fp16",
                           "masked-key-leak:fp32"},
    "nan_softmax_attention": {f"{p}:{d}" for p in ("fully-masked-rows", "grad-fully-masked")
                              for d in ("bf16", "fp16", "fp32")},
    "fp16_scores_attention": {"below-sentinel:fp16", "masked-key-leak:fp16", "qk-overflow:fp16"},
}


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(EXAMPLE_FAILURES))
def test_examples_fail_exactly_the_probes_of_their_bug(example):
    report = run_audit(AuditConfig(target=f"{EXAMPLES}/{example}.py:attention"))
    failed = {f"{r.name}:{r.dtype}" for r in report.results if not r.passed}
    assert failed == EXAMPLE_FAILURES[example]
