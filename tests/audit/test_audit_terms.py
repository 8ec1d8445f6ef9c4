"""The term sizes the verdict's floor uses: P|V|, P^T|dO|, |dS||K|, |dS|^T|Q|, against explicit float64.

The oracle here is attention written out op by op in float64 (scores, softmax, products), so the
auditor's route (golden attention of |V|, autograd into an additive mask) is checked against the
definition; golden gradients must equal float64 autograd through ``golden_attention`` exactly.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from attnum.attention.golden import golden_attention
from attnum.audit import terms
from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.numerics.rounding import round_to

B, H, G, N, S, D, DV = 2, 4, 2, 7, 11, 16, 8


def _inputs():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, N, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, G, S, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, G, S, DV, generator=g, dtype=torch.float64)
    w = torch.randn(B, H, N, DV, generator=g, dtype=torch.float64)
    keep = torch.rand(B, 1, N, S, generator=g) > 0.3
    keep[0, 0, 2] = False  # one empty row
    return q, k, v, w, keep


MASKS = ("none", "causal", "bool", "float")


def _mask_kw(name, keep):
    """The case's masking: none, top-left causal, bool (True = attend, one empty row), float (-inf + 0.5)."""
    if name == "bool":
        return {"attn_mask": keep}
    if name == "float":
        return {"attn_mask": torch.zeros(N, S, dtype=torch.float64).masked_fill(~keep[0, 0], -math.inf) + 0.5}
    return {"is_causal": True} if name == "causal" else {}


def _explicit(q, k, v, kw):
    """(scores S (B, H, N, S) leaf, P, K and V expanded): attention written out, the definition."""
    rep = H // G
    ke, ve = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    bias = torch.zeros(B, H, N, S, dtype=torch.float64)
    if kw.get("is_causal"):
        bias = bias.masked_fill(~torch.ones(N, S, dtype=torch.bool).tril(), -math.inf)
    m = kw.get("attn_mask")
    if m is not None:
        bias = bias.masked_fill(~m, -math.inf) if m.dtype == torch.bool else bias + m
    s = (q @ ke.transpose(-1, -2) / math.sqrt(D) + bias).requires_grad_(True)
    dead = torch.isneginf(s.detach()).all(dim=-1, keepdim=True)
    p = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return s, p, ke, ve


@pytest.mark.parametrize("mask", MASKS)
def test_output_terms_are_p_times_abs_v(mask):
    q, k, v, _, keep = _inputs()
    kw = _mask_kw(mask, keep)
    _, p, _, ve = _explicit(q, k, v, kw)
    t, n = terms.output_terms(q, k, v, **kw)
    assert n == S
    torch.testing.assert_close(t, p.detach() @ ve.abs(), rtol=1e-13, atol=1e-15)
    assert bool((t >= golden_attention(q, k, v, **kw).abs() - 1e-14).all())


@pytest.mark.parametrize("mask", MASKS)
def test_grad_terms_match_the_definitions_and_golden_autograd(mask):
    q, k, v, w, keep = _inputs()
    kw = _mask_kw(mask, keep)
    got = terms.grad_terms(q, k, v, w, **kw)
    # golden gradients: exactly float64 autograd through golden_attention with the case's own mask
    xs = [x.clone().requires_grad_(True) for x in (q, k, v)]
    (golden_attention(*xs, **kw) * w).sum().backward()
    for mine, x in zip(got.grads, xs, strict=True):
        assert torch.equal(mine, x.grad)
    # term sizes: the written-out products of absolute values, dS = dL/dscores by autograd
    scores, p, ke, ve = _explicit(q, k, v, kw)
    (ds,) = torch.autograd.grad(((p @ ve) * w).sum(), (scores,))
    p, sc = p.detach(), 1 / math.sqrt(D)
    want_dq = sc * ds.abs() @ ke.abs()
    want_dk = (sc * ds.abs().transpose(-1, -2) @ q.abs()).reshape(B, G, H // G, S, D).sum(2)
    want_dv = (p.transpose(-1, -2) @ w.abs()).reshape(B, G, H // G, S, DV).sum(2)
    for mine, want in zip(got.terms, (want_dq, want_dk, want_dv), strict=True):
        torch.testing.assert_close(mine, want, rtol=1e-12, atol=1e-14)
    assert got.n == (S, N * H // G, N * H // G)
    for t, g in zip(got.terms, got.grads, strict=True):
        assert bool((t >= g.abs() - 1e-13).all())


def test_low_lse_dq_column_zero_is_a_cancelling_sum():
    """grad-low-lse's construction: every key has the same k[0], so dq[:, 0] = k0 * sum_j dS_ij = 0
    exactly, summed from terms of size ~|k0| sum |dS|: the element the floor exists for."""
    g = torch.Generator().manual_seed(1)
    q = 0.1 * torch.randn(1, 1, 64, 64, generator=g, dtype=torch.float64)
    k = 0.1 * torch.randn(1, 1, 64, 64, generator=g, dtype=torch.float64)
    q[..., 0], k[..., 0] = 1.0, -120.0 * 8
    v = torch.randn(1, 1, 64, 64, generator=g, dtype=torch.float64)
    w = torch.randn(1, 1, 64, 64, generator=g, dtype=torch.float64)
    got = terms.grad_terms(q.float(), k.float(), v.float(), w)
    dq, t_dq = got.grads[0][..., 0], got.terms[0][..., 0]
    assert bool((t_dq > 1e6 * dq.abs()).all()) and float(t_dq.min()) > 1.0


def _tf32_inputs(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    q, k, v = (round_to(x, "tf32") for x in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                          enable_gqa=enable_gqa)


def _out_11_bits(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                       enable_gqa=enable_gqa)
    return round_to(o, "e8m10")


NUMERIC = ("odd-lengths", "accumulator-overflow", "long-sequence", "scale-argument", "gqa-mapping",
           "grad-accuracy", "grad-tile-tail")


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("fn", [_tf32_inputs, _out_11_bits], ids=["tf32-inputs", "out-e8m10"])
def test_floor_does_not_hide_reduced_precision_in_fp32(fn):
    """An 'fp32' kernel that computes in TF32 or returns 11 significant bits fails every numeric probe,
    long sums included: the floor is rounding analysis for fp32, not room for a narrower format."""
    report = run_audit(AuditConfig(target=fn.__name__, dtypes="fp32", probes=",".join(NUMERIC)), target=fn)
    rows = {r.name: r for r in report.results}
    assert {n: rows[n].status for n in NUMERIC} == dict.fromkeys(NUMERIC, "fail"), \
        {n: (rows[n].status, rows[n].target_error, rows[n].bound) for n in NUMERIC}
