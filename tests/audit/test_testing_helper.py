"""``attnum.testing.assert_attention_close``: one line in a kernel author's test suite."""

import sys

import _paths
import pytest
import torch.nn.functional as F

from attnum.testing import assert_attention_close

EXAMPLES = _paths.EXAMPLES


pytestmark = pytest.mark.usefixtures("one_thread")


def test_torch_sdpa_passes_and_returns_the_report():
    report = assert_attention_close(F.scaled_dot_product_attention, dtypes=("bf16",),
                                    probes=("below-sentinel", "fully-masked-rows", "gqa-mapping"))
    assert report.passed and len(report.results) == 3


def test_buggy_kernel_raises_with_the_three_numbers(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from sentinel_attention import attention

    with pytest.raises(AssertionError) as info:
        assert_attention_close(attention, dtypes="fp32", probes="below-sentinel,scale-argument")
    msg = str(info.value)
    assert "below-sentinel [fp32] fail" in msg and "scale-argument" not in msg
    assert "target_error=" in msg and "baseline_error=" in msg and "bound=" in msg
    sys.modules.pop("sentinel_attention", None)


def test_strict_makes_behaviour_notes_fail():
    assert_attention_close(F.scaled_dot_product_attention, dtypes="fp32", probes="nonfinite-masked-kv")
    with pytest.raises(AssertionError, match="nonfinite-masked-kv"):
        assert_attention_close(F.scaled_dot_product_attention, dtypes="fp32", probes="nonfinite-masked-kv",
                               strict=True)


def test_a_declared_convention_is_honoured():
    """A bottom-right kernel that says so passes batch-invariance and causal-alignment through the
    helper; an explicit causal_alignment= overrides the declaration (and then it fails)."""
    import attnum

    def bottom_right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        align = "bottom_right" if is_causal else "top_left"
        return attnum.golden_attention(q, k, v, is_causal=is_causal, scale=scale, causal_alignment=align).to(q.dtype)

    bottom_right.attnum_causal_alignment = "bottom_right"
    report = assert_attention_close(bottom_right, dtypes="fp32", probes="batch-invariance,causal-alignment")
    assert report.passed
    with pytest.raises(AssertionError, match="causal-alignment"):
        assert_attention_close(bottom_right, dtypes="fp32", probes="causal-alignment", causal_alignment="top_left")
