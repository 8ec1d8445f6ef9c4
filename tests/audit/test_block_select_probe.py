"""block-select (NSA's selected branch): the selection mask against a plain loop over blocks (float64), and
planted kernels: a correct block-sparse kernel passes, each planted bug fails the cases that reach it (found
from the data: which cases hold the input the bug needs), an undeclared target is "unsupported"."""

from __future__ import annotations

import math

import pytest
import torch

from attnum.audit.config import AuditConfig
from attnum.audit.probes.block_select import causal_keep, select_mask
from attnum.audit.runner import run_audit

pytestmark = pytest.mark.usefixtures("one_thread")


def test_select_mask_equals_a_loop_over_listed_blocks():
    g = torch.Generator().manual_seed(3)
    n, s, bs = 10, 37, 8
    idx = torch.randint(-1, 5, (2, 3, n, 4), generator=g)
    keep = causal_keep(n, s, "bottom_right")
    got = select_mask(idx, s, bs, keep)
    want = torch.zeros(2, 3, n, s, dtype=torch.bool)
    for b in range(2):
        for h in range(3):
            for i in range(n):
                for t in idx[b, h, i].tolist():
                    if t >= 0:
                        for j in range(t * bs, min(s, (t + 1) * bs)):
                            want[b, h, i, j] = bool(keep[i, j])
    assert torch.equal(got, want)
    assert torch.equal(causal_keep(3, 5, "top_left"), torch.ones(3, 5, dtype=torch.bool).tril())


def block_sparse(q, k, v, *, is_causal=True, scale=None, enable_gqa=False, block_indices=None, block_size=None,
                 attn_mask=None, dropout_p=0.0, bug=None, changed=None):
    """A block-sparse kernel in fp32 (bottom-right causal), output rounded once to q's dtype. ``bug`` plants
    one; ``changed`` (a list) records per call whether the bug changed which keys a query reads."""
    B, H, N, d = q.shape
    G, S = k.shape[1], k.shape[2]
    causal = causal_keep(N, S, "bottom_right")
    right = select_mask(block_indices, S, block_size, causal)
    idx = block_indices.clone()
    if bug == "minus_one_is_block0":
        idx = idx.clamp(min=0)
    if bug == "first_query_selection":  # a tile of 16 queries shares its first query's selection
        idx = idx[:, :, ::16].repeat_interleave(16, dim=2)[:, :, :N]
    if bug == "skip_last_listed":
        idx[..., -1] = -1
    keep = select_mask(idx, S, block_size, torch.ones(N, S, dtype=torch.bool) if bug == "no_causal" else causal)
    if changed is not None:
        changed.append(not torch.equal(keep, right))
    keep = keep.repeat_interleave(H // G, dim=1)
    kf, vf = (x.float().repeat_interleave(H // G, 1) for x in (k, v))
    s = (q.float() @ kf.transpose(-1, -2)) * (1.0 / math.sqrt(d) if scale is None else scale)
    p = torch.softmax(s.masked_fill(~keep, -math.inf), dim=-1).nan_to_num(0.0)
    return (p @ vf).to(q.dtype)


def declared(bug=None, changed=None):
    def target(q, k, v, **kw):
        return block_sparse(q, k, v, **kw, bug=bug, changed=changed)
    target.attnum_block_select = True
    target.attnum_causal_alignment = "bottom_right"
    return target


def cases(fn, dtypes="bf16,fp16"):
    report = run_audit(AuditConfig(dtypes=dtypes, probes="block-select"), target=fn)
    return [(r.dtype, c.label, c.verdict) for r in report.results for c in r.cases]


def test_a_correct_block_sparse_kernel_passes_every_case():
    got = cases(declared())
    assert len(got) == 14
    assert all(v.status == "pass" for *_, v in got), [(lab, v.note) for _, lab, v in got if v.status != "pass"]


def test_an_undeclared_target_is_unsupported():
    def plain(q, k, v, **kw):
        return block_sparse(q, k, v, **kw)
    got = cases(plain, "bf16")
    assert [v.status for *_, v in got] == ["unsupported"]
    assert "attnum_block_select" in got[0][2].note


@pytest.mark.parametrize("bug", ["no_causal", "minus_one_is_block0", "first_query_selection", "skip_last_listed"])
def test_each_planted_bug_fails_exactly_the_cases_whose_selection_it_changes(bug):
    changed: list[bool] = []
    got = cases(declared(bug, changed))
    assert len(changed) == len(got) == 14  # one call per case, in order
    failed = [v.status == "fail" for *_, v in got]
    assert any(changed)
    assert failed == changed, [(lab, v.status, c) for (_, lab, v), c in zip(got, changed, strict=True)]
