"""softcap-overflow, window-poisoned-keys, attention-sinks: golden's softcap and sinks against their
plain-attention rewrites (float64), and planted kernels: a correct one passes each probe, each planted
bug fails it for its reason, a target that does not declare the feature gets "unsupported"."""

from __future__ import annotations

import math

import pytest
import torch

from attnum import golden_attention
from attnum.audit.config import AuditConfig
from attnum.audit.probes.attention_sinks import reference as sink_reference
from attnum.audit.probes.window_poisoned_keys import keep_mask
from attnum.audit.runner import run_audit
from attnum.errors import AttnumInputError

pytestmark = pytest.mark.usefixtures("one_thread")


def attention_fp32(q, k, v, *, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, softcap=None,
                   window_size=None, sinks=None, tanh=torch.tanh, sink_max=True, window_slack=0, v_outside=False):
    """Plain fp32 attention with the three features, output rounded once to q's dtype (the passing kernel:
    it never reads a V row no query may see); the keyword tails plant the bugs (``v_outside``: P = 0 times
    every V row, vLLM before PR #30887)."""
    H, N, S = q.shape[1], q.shape[2], k.shape[2]
    qf, kf, vf = q.float(), k.float().repeat_interleave(H // k.shape[1], 1), v.float().repeat_interleave(
        H // v.shape[1], 1)
    s = (qf @ kf.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if softcap:
        s = softcap * tanh(s / softcap)
    keep = torch.ones(N, S, dtype=torch.bool)
    if window_size is not None:
        left, right = window_size
        keep = keep_mask(N, S, (left + window_slack if left >= 0 else left, right), is_causal, "top_left")
    elif is_causal:
        keep = torch.ones(N, S, dtype=torch.bool).tril()
    s = s.masked_fill(~keep, -math.inf)
    if window_size is not None and not v_outside:
        vf = torch.where(keep.any(0)[:, None], vf, 0.0)  # the V rows outside every window are never loaded
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.float()
    if sinks is None:
        return (torch.softmax(s, dim=-1) @ vf).to(q.dtype)
    m = s.amax(dim=-1, keepdim=True)
    e = torch.exp(s - m)
    sink = sinks.float().view(1, H, 1, 1)
    denom = e.sum(dim=-1, keepdim=True) + (torch.exp(sink - m) if sink_max else torch.exp(sink))
    return ((e / denom) @ vf).to(q.dtype)


def declare(fn, **features):
    def target(q, k, v, **kw):
        return fn(q, k, v, **kw)
    for name, value in features.items():
        setattr(target, f"attnum_{name}", value)
    target.__name__ = fn.__name__ if hasattr(fn, "__name__") else "target"
    return target


def exp_tanh(x):
    """tanh as (e^2x - 1) / (e^2x + 1) in float32: inf / inf = NaN once 2x > 88.7 (vLLM #56578)."""
    e = torch.exp(2 * x)
    return (e - 1) / (e + 1)


def audit(fn, probe, dtypes="fp32,bf16,fp16"):
    report = run_audit(AuditConfig(dtypes=dtypes, probes=probe), target=fn)
    return {r.dtype: r for r in report.results}


def test_golden_softcap_is_attention_on_the_capped_scores():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g, dtype=torch.float64) * 6 for _ in range(3))
    cap = 1.5
    s = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    want = torch.softmax(cap * torch.tanh(s / cap), dim=-1) @ v
    torch.testing.assert_close(golden_attention(q, k, v, softcap=cap), want, rtol=1e-14, atol=1e-14)
    # before masking: a causal row keeps only capped scores of visible keys
    tri = torch.ones(5, 5, dtype=torch.bool).tril()
    want_c = torch.softmax((cap * torch.tanh(s / cap)).masked_fill(~tri, -math.inf), dim=-1) @ v
    torch.testing.assert_close(golden_attention(q, k, v, softcap=cap, is_causal=True), want_c, rtol=1e-14,
                               atol=1e-14)
    with pytest.raises(AttnumInputError, match="softcap=-1"):
        golden_attention(q, k, v, softcap=-1)


def test_golden_sinks_equal_an_extra_zero_value_key_and_empty_rows_give_zero():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 3, 6, 8, generator=g, dtype=torch.float64) for _ in range(3))
    sinks = torch.tensor([0.0, -2.0, 5.0], dtype=torch.float64)
    ref, kw = sink_reference(q, k, v, sinks, is_causal=True)
    want = golden_attention(*ref, **kw)
    out, lse = golden_attention(q, k, v, sinks=sinks, is_causal=True, return_lse=True)
    torch.testing.assert_close(out, want, rtol=1e-14, atol=1e-14)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    s = s.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), -math.inf)
    full = torch.cat([s, sinks.view(1, 3, 1, 1).expand(1, 3, 6, 1)], dim=-1)
    torch.testing.assert_close(lse, torch.logsumexp(full, dim=-1), rtol=1e-14, atol=1e-14)
    empty = golden_attention(q, k, v, sinks=sinks, attn_mask=torch.zeros(1, 1, 6, 6, dtype=torch.bool))
    assert bool((empty == 0).all())
    with pytest.raises(AttnumInputError, match="sinks"):
        golden_attention(q, k, v, sinks=torch.zeros(2))


def test_window_mask_follows_flash_attn_window_size():
    # causal window W = 3 is window_size=(2, 0): query i sees i-2..i; bottom-right shifts by S - N
    keep = keep_mask(2, 5, (2, 0), True, "bottom_right")
    assert keep.tolist() == [[False, True, True, True, False], [False, False, True, True, True]]
    assert keep_mask(3, 3, (-1, 1), False, "top_left").tolist() == [[True, True, False], [True, True, True],
                                                                   [True, True, True]]
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 4, 8, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(golden_attention(q, k, v, window=(1, 0), is_causal=True),
                               golden_attention(q, k, v, attn_mask=keep_mask(4, 4, (1, 0), True, "top_left")))


@pytest.mark.parametrize("probe", ["softcap-overflow", "window-poisoned-keys", "attention-sinks"])
def test_an_undeclared_target_is_unsupported_never_pass(probe):
    rows = audit(declare(attention_fp32), probe, dtypes="fp32")
    assert rows["fp32"].status == "unsupported"
    assert "does not declare" in rows["fp32"].note


def test_a_malformed_declaration_is_an_error():
    rows = audit(declare(attention_fp32, softcap="yes"), "softcap-overflow", dtypes="fp32")
    assert rows["fp32"].status == "error" and "attnum_softcap" in rows["fp32"].note


def test_softcap_correct_passes_and_exp_tanh_gives_nan_past_88_cap():
    good = audit(declare(attention_fp32, softcap=True), "softcap-overflow")
    assert all(r.status == "pass" for r in good.values()), {d: r.note for d, r in good.items()}
    bad = audit(declare(lambda q, k, v, **kw: attention_fp32(q, k, v, tanh=exp_tanh, **kw), softcap=True),
                "softcap-overflow")
    for r in bad.values():
        assert r.status == "fail" and "NaN" in r.note, r.note
        fails = [c.label for c in r.cases if c.verdict.status == "fail"]
        assert fails and all("~100 x" in c or "~1000 x" in c for c in fails), fails


def test_window_correct_passes_and_an_off_by_one_window_fails():
    good = audit(declare(attention_fp32, window=True), "window-poisoned-keys")
    assert all(r.status == "pass" for r in good.values()), {d: r.note for d, r in good.items()}
    bad = audit(declare(lambda q, k, v, **kw: attention_fp32(q, k, v, window_slack=1, **kw), window=True),
                "window-poisoned-keys")
    for r in bad.values():
        assert r.status == "fail", r.note
        assert r.target_error > 10 * r.bound
        # each left-poisoned case reads the highest-scoring key: the output moves by O(|V|) = O(4)
        left = [c for c in r.cases if "right side" not in c.label and "NaN" not in c.label
                and c.verdict.status != "unsupported"]
        assert all(c.verdict.status == "fail" and c.verdict.target_error > 1.0 for c in left), r.note


def test_a_window_kernel_that_multiplies_v_outside_the_window_by_zero_fails_on_nan_there():
    """vLLM's unified attention before PR #30887: scores outside the window masked, their V still loaded:
    0 * NaN. Only the NaN-in-V cases fail; the same kernel passes every finite case."""
    bad = audit(declare(lambda q, k, v, **kw: attention_fp32(q, k, v, v_outside=True, **kw), window=True),
                "window-poisoned-keys", dtypes="fp32")["fp32"]
    assert bad.status == "fail"
    failed = {c.label for c in bad.cases if c.verdict.status == "fail"}
    assert failed and all("NaN in V" in label for label in failed), failed
    assert all(c.verdict.status == "pass" for c in bad.cases if "NaN in K" in c.label)


def test_sinks_correct_passes_and_a_sink_without_the_row_max_fails():
    good = audit(declare(attention_fp32, sinks=True), "attention-sinks")
    assert all(r.status == "pass" for r in good.values()), {d: r.note for d, r in good.items()}
    bad = audit(declare(lambda q, k, v, **kw: attention_fp32(q, k, v, sink_max=False, **kw), sinks=True),
                "attention-sinks")
    for r in bad.values():
        assert r.status == "fail", r.note
    ignored = audit(declare(lambda q, k, v, sinks=None, **kw: attention_fp32(q, k, v, **kw), sinks=True),
                    "attention-sinks", dtypes="fp32")
    assert ignored["fp32"].status == "fail"


KERNEL_FILE = '''
import math
import torch


def capped(query, key, value, attn_mask=None, is_causal=False, scale=None, softcap=None):
    s = (query.float() @ key.float().transpose(-1, -2)) * (scale or 1.0 / math.sqrt(query.shape[-1]))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    return (torch.softmax(s, dim=-1) @ value.float()).to(query.dtype)


capped.attnum_softcap = True
'''


def test_a_file_target_declares_softcap_through_the_kernel_server(tmp_path):
    # the declaration crosses the process boundary (sandbox attrs) and softcap= reaches the function
    path = tmp_path / "capped.py"
    path.write_text(KERNEL_FILE)
    report = run_audit(AuditConfig(target=f"{path}:capped", dtypes="fp32", probes="softcap-overflow"), isolate=True)
    (row,) = report.results
    assert report.isolated and row.status == "pass", row.note
    assert len(row.cases) == 12
