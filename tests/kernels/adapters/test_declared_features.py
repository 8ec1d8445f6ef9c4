"""Every built-in adapter declares the score features its upstream kernel takes at the pinned version (read
from the fetched kernel files: vllm 0.33.0, sglang 0.5.3, fla-core 0.6.0, sageattention 1.0.6), and the
conversions to each kernel's own arguments are exact; the two vLLM findings the declarations opened are held
(slow: Triton's interpreter)."""

from __future__ import annotations

import pytest
from _wheel_helpers import fetched_or_skip

from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.kernels import conventions
from attnum.kernels import serving_layout as lay
from attnum.kernels.registry import KERNELS

# softcap, window, sinks per built-in (what docs/audit.md's "Score features" table says)
DECLARED = {
    "vllm-unified": {"softcap", "window", "sinks"},
    "vllm-unified-fp8kv": {"softcap", "window", "sinks"},
    "vllm-triton-decode": {"softcap"},
    "vllm-mla-decode": {"softcap"},
    "vllm-prefix-prefill": {"window", "sinks"},
    "sglang-decode": {"softcap", "sinks"},
    "sglang-extend": {"softcap", "window", "sinks"},
    "sglang-context": set(),
    "fla-parallel-attn": {"window", "sinks"},
    "fla-decode": {"window", "sinks"},
    "sage1-triton": set(),
    "vllm-triton-merge": set(),
    "sglang-merge": set(),
}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_each_builtin_declares_what_its_kernel_takes(name):
    fn = KERNELS[name].fn
    got = {f for f in ("softcap", "window", "sinks") if conventions.feature(fn, f)}
    assert got == DECLARED[name]


@pytest.mark.parametrize("window,causal,mode,want", [
    (None, True, "symmetric", 0), ((-1, -1), False, "symmetric", 0), ((-1, 0), True, "left", 0),
    ((15, 0), True, "none", 16), ((15, -1), True, "left", 16), ((15, 7), True, "symmetric", 16),  # causal: right 0
    ((8, 8), False, "symmetric", 9), ((8, -1), False, "left", 9), ((0, 0), False, "symmetric", 1),
])
def test_window_extent_is_flash_attn_window_size_as_one_int(window, causal, mode, want):
    assert lay.window_extent(window, causal, "k", non_causal=mode) == want


@pytest.mark.parametrize("window,mode", [((8, 7), "symmetric"), ((8, 8), "left"), ((-1, 4), "left"),
                                         ((8, -1), "symmetric"), ((8, 0), "none"), ((-2, 0), "left")])
def test_a_window_the_kernel_cannot_express_is_refused_not_approximated(window, mode):
    with pytest.raises(NotImplementedError, match="window"):
        lay.window_extent(window, False, "k", non_causal=mode)


def test_softcap_none_or_zero_is_off_and_a_negative_cap_is_refused():
    assert lay.softcap_value(None, "k") == 0.0 and lay.softcap_value(0, "k") == 0.0
    assert lay.softcap_value(30, "k") == 30.0
    with pytest.raises(NotImplementedError, match="softcap"):
        lay.softcap_value(-1.0, "k")


def _window_row(target: str):
    fetched_or_skip(target.split("-")[0])
    report = run_audit(AuditConfig(target=target, dtypes="bf16", probes="window-poisoned-keys"))
    assert report.available, report.reason
    return report.results[0]


@pytest.mark.slow  # interpreted Triton, 10-30 s
def test_vllm_unified_non_causal_window_zeroes_v_past_the_block_first_query():
    """docs/findings/vllm-unified-noncausal-window-v-mask.md: the two-sided cases fail (finite, wrong), every
    causal window case passes, NaN before the window included."""
    row = _window_row("vllm-unified")
    failed = {c.label for c in row.cases if c.verdict.status == "fail"}
    assert failed and all("(8, 8)" in label for label in failed), failed
    assert all(c.verdict.status == "pass" for c in row.cases if "causal" in c.label)
    assert not any("NaN" in c.verdict.note for c in row.cases if c.verdict.status == "fail")


@pytest.mark.slow  # interpreted Triton, 20-60 s
def test_vllm_prefix_prefill_reads_v_before_the_window():
    """docs/findings/vllm-prefix-prefill-window-freed-pages-nan.md: every NaN-in-V case fails with NaN, every
    NaN-in-K case passes (the scores are masked, the values multiplied by P = 0)."""
    row = _window_row("vllm-prefix-prefill")
    nan_v = [c for c in row.cases if "NaN in V" in c.label and c.verdict.status != "unsupported"]
    nan_k = [c for c in row.cases if "NaN in K" in c.label and c.verdict.status != "unsupported"]
    assert nan_v and all(c.verdict.status == "fail" and "NaN" in c.verdict.note for c in nan_v)
    assert nan_k and all(c.verdict.status == "pass" for c in nan_k)
