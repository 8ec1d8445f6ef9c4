"""merge-empty-convention and merge-empty-chain: a merge that is right for its declared empty state
(-inf, +inf, a finite sentinel; base e or 2) passes, and each planted merge fails for its reason:
ring-flash-attn's sigmoid update turns a chain that starts empty into NaN, FlashInfer's Triton
merge_states' (0, -5e4, 1) start dilutes live states just above the sentinel, a textbook merge reads
FA2's +inf empty rows as infinite mass."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnum.attention.serving.merge import merge_states
from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.errors import AttnumInputError
from attnum.kernels.serving import ServingTarget

pytestmark = pytest.mark.usefixtures("one_thread")
PROBES = "merge-empty-convention,merge-empty-chain"


def audit(fn, dtypes="fp32,bf16"):
    report = run_audit(AuditConfig(dtypes=dtypes, probes=PROBES), target=fn)
    return {(r.name, r.dtype): r for r in report.results}


def _pairwise(n_way):
    return lambda o_a, lse_a, o_b, lse_b: n_way(torch.stack([o_a, o_b]), torch.stack([lse_a, lse_b]))


def correct(base, empty_lse, *, n_way=True):
    """attnum's merge in fp32 under the declared convention: passes both probes."""
    def merge_n(o_n, lse_n):
        m = merge_states(list(zip(o_n, lse_n, strict=True)), policy="fp32", lse_base=base, empty_lse=empty_lse)
        return m.o.to(o_n.dtype), m.lse.float()

    kw = {"merge_states": merge_n} if n_way else {}
    return ServingTarget(f"correct-{base}-{empty_lse:g}", merge_state=_pairwise(merge_n), lse_base=base,
                         empty_lse=empty_lse, **kw)


def sigmoid_chain(o_n, lse_n):
    """ring-flash-attention's update_out_and_lse (utils.py), written out: fp32 running out, natural log."""
    out, lse = o_n[0].float(), lse_n[0].float()
    for o, s in zip(o_n[1:], lse_n[1:], strict=True):
        out = out - torch.sigmoid(s - lse)[..., None] * (out - o.float())
        lse = lse - F.logsigmoid(lse - s)
    return out.to(o_n.dtype), lse


def phantom_start(o_n, lse_n):
    """FlashInfer 0.7.2's Triton merge_states: a running (o, m, d) from (0, -5e4, 1), base 2."""
    o = torch.zeros(o_n.shape[1:], dtype=torch.float32)
    m = torch.full(lse_n.shape[1:], -5e4)
    d = torch.ones_like(m)
    for v, s in zip(o_n, lse_n, strict=True):
        m_new = torch.maximum(m, s)
        a, b = torch.exp2(m - m_new), torch.exp2(s - m_new)
        d, o, m = d * a + b, o * a[..., None] + v.float() * b[..., None], m_new
    return (o / d[..., None]).to(o_n.dtype), m + torch.log2(d)


def textbook(o_a, lse_a, o_b, lse_b):
    """exp(lse - max) with no convention of its own: +inf is mass, -inf - (-inf) is NaN."""
    m = torch.maximum(lse_a, lse_b)
    e_a, e_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    o = (o_a.float() * e_a[..., None] + o_b.float() * e_b[..., None]) / (e_a + e_b)[..., None]
    return o.to(o_a.dtype), m + torch.log(e_a + e_b)


@pytest.mark.parametrize("base,empty_lse", [("e", -math.inf), (2, -math.inf), ("e", math.inf), (2, -5e4)])
@pytest.mark.parametrize("n_way", [True, False])
def test_a_merge_right_for_its_convention_passes(base, empty_lse, n_way):
    rows = audit(correct(base, empty_lse, n_way=n_way))
    assert all(r.status == "pass" for r in rows.values()), {k: r.note for k, r in rows.items()}
    if n_way:
        cases = [c.label for r in rows.values() for c in r.cases]
        assert any("(merge_states)" in c for c in cases) and not any("chained" in c for c in cases)


def test_the_sigmoid_update_poisons_a_chain_that_starts_empty():
    ring = ServingTarget("sigmoid", merge_state=_pairwise(sigmoid_chain), merge_states=sigmoid_chain)
    rows = audit(ring)
    for dt in ("fp32", "bf16"):
        chain = rows[("merge-empty-chain", dt)]
        assert chain.status == "fail" and "NaN" in chain.note, chain.note
        by_label = {c.label: c.verdict.status for c in chain.cases}
        assert by_label["[live, empty, live] (merge_states)"] == "pass"  # empty later: fine
        assert by_label["[empty, live, live] (merge_states)"] == "fail"
        # empty (+) live: o right, the running lse NaN
        conv = rows[("merge-empty-convention", dt)]
        assert conv.status == "fail" and "lse: NaN" in conv.note, conv.note


def test_chaining_merge_state_catches_the_same_poison_without_merge_states():
    ring = ServingTarget("sigmoid-2", merge_state=_pairwise(sigmoid_chain))
    chain = audit(ring, "fp32")[("merge-empty-chain", "fp32")]
    assert chain.status == "fail" and "NaN" in chain.note and "chained" in chain.note, chain.note


def test_a_phantom_start_state_dilutes_live_states_just_above_the_sentinel():
    fi = ServingTarget("phantom", merge_state=_pairwise(phantom_start), merge_states=phantom_start, lse_base=2,
                       empty_lse=-5e4)
    row = audit(fi, "fp32")[("merge-empty-convention", "fp32")]
    assert row.status == "fail", row.note
    failed = {c.label.split(": ", 1)[1] for c in row.cases if c.verdict.status == "fail"}
    # 2 above the sentinel: the phantom (d = 1) weighs 1 / 4 of the live state; two sentinel states are
    # mass too (lse -5e4 + log2 3, not the sentinel)
    assert failed == {"empty+live lse~-49998", "live+empty lse~-49998", "empty+empty"}, failed
    # ordinary LSEs merge right: the bug hides from random-input tests
    assert all(c.verdict.status == "pass" for c in row.cases if "lse~0" in c.label or "lse~8" in c.label)


def test_fa2_inf_empty_rows_read_as_mass_fail_under_the_inf_convention():
    row = audit(ServingTarget("textbook", merge_state=textbook, empty_lse=math.inf), "fp32")
    conv = row[("merge-empty-convention", "fp32")]
    assert conv.status == "fail" and "NaN" in conv.note, conv.note
    assert "empty lse=inf base e" in conv.note


@pytest.mark.parametrize("bad", [-10.0, 0.0, "x"])
def test_a_sentinel_must_lie_far_below_any_live_lse(bad):
    with pytest.raises(AttnumInputError, match="empty_lse"):
        ServingTarget("s", merge_state=textbook, empty_lse=bad)
