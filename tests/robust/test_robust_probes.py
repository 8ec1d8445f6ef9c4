"""The probes issue #13 asked for catch the bugs they model, and only through their new cases.

Each planted kernel below is correct except for one documented bug; it passes the probe's cases that
existed before (ragged or small lengths, no float bias) and fails the new ones, which shows the new
cases are what catches it. torch's own math backend passes all of them.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from attnum.audit.config import AuditConfig
from attnum.audit.probes.float_bias import alibi
from attnum.audit.runner import run_audit

pytestmark = [pytest.mark.usefixtures("one_thread")]


def audit(fn, probes, dtypes):
    report = run_audit(AuditConfig(target="planted", dtypes=dtypes, probes=probes), target=fn)
    return {(r.name, r.dtype): r for r in report.results}


def failing(row):
    return [c.label for c in row.cases if c.verdict.status == "fail"]


def bias_before_scale(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False):
    """JAX Pallas TPU flash_attention's order: s = (q.k^T + bias) * scale, in fp32."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    s = query.float() @ key.float().transpose(-2, -1)
    if attn_mask is not None:
        s = s + (attn_mask.float() if attn_mask.dtype != torch.bool else
                 torch.zeros_like(s).masked_fill(~attn_mask, -math.inf))
    s = s * scale
    if is_causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(~torch.ones(n, m, dtype=torch.bool).tril(), -math.inf)
    return (torch.softmax(s, -1) @ value.float()).to(query.dtype)


def even_path_without_max(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                          enable_gqa=False):
    """Correct, except that N = S at a multiple of 64 takes an "even" path that skips the running max:
    exp() of the raw scaled logits, in fp32."""
    n, s = query.shape[-2], key.shape[-2]
    if n != s or n % 64:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                              scale=scale)
    sc = (1.0 / math.sqrt(query.shape[-1]) if scale is None else scale) * (query.float() @ key.float().mT)
    if attn_mask is not None:
        sc = sc + attn_mask.float() if attn_mask.dtype != torch.bool else sc.masked_fill(~attn_mask, -math.inf)
    if is_causal:
        sc = sc.masked_fill(~torch.ones(n, s, dtype=torch.bool).tril(), -math.inf)
    p = sc.exp()
    return ((p / p.sum(-1, keepdim=True)) @ value.float()).to(query.dtype)


class _EvenBackward(torch.autograd.Function):
    """SDPA forward; the backward drops the last 64 keys' dV when N is a multiple of 128."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):
        ctx.save_for_backward(q, k, v)
        ctx.is_causal, ctx.scale = is_causal, scale
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v = (x.detach().requires_grad_(True) for x in ctx.saved_tensors)
        with torch.enable_grad():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=ctx.is_causal, scale=ctx.scale)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), d_out)
        if q.shape[-2] % 128 == 0:
            dv = dv.clone()
            dv[..., -64:, :] = 0
        return dq, dk, dv, None, None


def even_backward_bug(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False):
    if attn_mask is not None:
        raise NotImplementedError("planted kernel: no mask")
    return _EvenBackward.apply(query, key, value, is_causal, scale)


def test_alibi_slopes_are_press_et_al():
    b = alibi(8, 3, 3)
    assert b.shape == (1, 8, 3, 3)
    assert b[0, 0, 0, 2].item() == -2 * 2.0 ** -1  # head 1 of 8: m = 2^-1, |i - j| = 2
    assert b[0, 7, 2, 0].item() == -2 * 2.0 ** -8
    assert (b[0, :, 1, 1] == 0).all()


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_float_bias_catches_bias_added_before_the_scale(dtype):
    rows = audit(bias_before_scale, "float-bias,additive-mask-overflow,scale-argument", dtype)
    bias = rows[("float-bias", dtype)]
    assert bias.status == "fail", bias.note
    assert len(failing(bias)) == len(bias.cases)  # every case: the bias is shrunk by 1/sqrt(d)
    worst = max(c.verdict.target_error for c in bias.cases)
    print(f"bias before scale, {dtype}: target error {worst:.3g}, bound {bias.bound:.3g}")
    assert worst > 0.5 and worst > 10 * bias.bound
    # The probes that existed before cannot see it: finfo.min masks stay huge after the scale.
    assert rows[("additive-mask-overflow", dtype)].status == "pass"
    assert rows[("scale-argument", dtype)].status == "pass"


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_torch_math_passes_float_bias(dtype):
    rows = audit(F.scaled_dot_product_attention, "float-bias", dtype)
    assert rows[("float-bias", dtype)].status == "pass", rows[("float-bias", dtype)].note


def test_extreme_values_at_exact_tile_multiples():
    rows = audit(even_path_without_max, "exp-overflow,below-sentinel,qk-overflow", "fp32")
    for probe in ("exp-overflow", "below-sentinel", "qk-overflow"):
        labels = failing(rows[(probe, "fp32")])
        assert labels, f"{probe} missed the even-path bug"
        assert all("N=S=" in label for label in labels), labels  # only the new tile-multiple cases


def test_gradients_at_multiples_of_128():
    rows = audit(even_backward_bug, "grad-tile-tail,grad-accuracy", "fp32")
    tail = failing(rows[("grad-tile-tail", "fp32")])
    assert tail and all(label.startswith(("N=S=128 ", "N=S=256 ")) for label in tail), tail
    acc = failing(rows[("grad-accuracy", "fp32")])
    assert acc == ["N=S=256 causal"], acc
