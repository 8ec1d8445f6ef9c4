"""max_shift="qiu-yao": the rule, no exact 1 in P~ on tied rows, fp64 unchanged, the underflow guard."""

import math

import pytest
import torch

import attnum
from attnum import flash_attention, golden_attention, round_to
from attnum.attention import steps
from attnum.attention.flash_backward import flash_backward
from attnum.errors import AttnumInputError
from attnum.kernels.registry import require
from attnum.numerics.metrics import deviation
from attnum.numerics.policy import parse_policy
from attnum.workloads.inputs import TIE_DISTINCT, tied_rows

EPS64 = torch.finfo(torch.float64).eps
POLICIES = ["uniform:bf16", "fa2:bf16", "fp32", "uniform:fp16"]


def tied_qkv(N=48, S=96, H=2, d=16, seed=0, logit=1.0):
    """q, v normal; keys cycle through TIE_DISTINCT vectors: every row's max is tied in every tile
    of >= 2 * TIE_DISTINCT keys."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, N, d, generator=g, dtype=torch.float64) * logit
    k = tied_rows((1, H, S, d), TIE_DISTINCT, g)
    v = torch.randn(1, H, S, d, generator=g, dtype=torch.float64)
    return q, k, v


def capture_exp(monkeypatch):
    """Every P~ tile the forward rounds at the ``exp`` site, as the kernel uses it."""
    seen = []
    real = steps.round_site_

    def spy(policy, site, x, ws):
        out = real(policy, site, x, ws)
        if site == "exp":
            seen.append(out.clone())
        return out

    monkeypatch.setattr(steps, "round_site_", spy)
    monkeypatch.setenv("ATTNUM_JIT", "0")  # the unfused reference step (the fused one: same bits, test_fused.py)
    from attnum.attention import flash_forward

    monkeypatch.setattr(flash_forward, "ROW_BLOCK_ELEMS", 1 << 40)  # whole tiles, one per step (no row blocks)
    return seen


def test_policy_field_parses_validates_and_resolves():
    p = parse_policy("uniform:bf16,max_shift=qiu-yao")
    assert p.max_shift == "qiu-yao" and p.describe()["max_shift"] == "qiu-yao"
    assert parse_policy("uniform:bf16").max_shift == "none"
    assert p != parse_policy("uniform:bf16")  # different arithmetic, different policy
    with pytest.raises(AttnumInputError, match="max_shift='2x' is not allowed"):
        parse_policy("fa2:bf16,max_shift=2x")
    assert require("flash:uniform:bf16,max_shift=qiu-yao", "cpu").available


def test_the_rule_on_hand_made_rows():
    tol = steps.QIU_YAO_TOL
    s = torch.tensor([[3.0, 3.0, 1.0],           # tie at m > 0      -> 2m
                      [-2.0, -2.0 - tol, -5.0],  # within tol, m < 0 -> 0
                      [1.0, 1.0 - 2 * tol, 0.0],  # one score at max  -> m
                      [0.0, 0.0, -1.0],           # tie at 0          -> 0 (no change possible)
                      [-math.inf, -math.inf, -math.inf],  # empty row -> -inf
                      [90.0, 90.0, 0.0]], dtype=torch.float64)  # tie beyond the limit -> m
    m = s.amax(-1, keepdim=True)
    got = steps.qiu_yao_shift(s, m, limit=87.0).squeeze(-1).tolist()
    assert got == [6.0, 0.0, 1.0, 0.0, -math.inf, 90.0]
    assert steps.shift_limit(parse_policy("uniform:bf16")) == -math.log(2.0 ** -126)
    assert steps.shift_limit(parse_policy("fa2:fp16")) == -math.log(2.0 ** -14)  # probs in fp16


@pytest.mark.parametrize("variant", ["fa2", "fa1"])
@pytest.mark.parametrize("policy", POLICIES)
def test_no_exact_one_in_p_on_tied_rows(policy, variant, monkeypatch):
    q, k, v = tied_qkv()
    m = golden_scores_max(q, k)
    assert float(m.abs().min()) > 2.0 ** -6  # exp(-|m|) rounds below 1 in every format tested
    assert float(m.abs().max()) < steps.shift_limit(parse_policy(policy))
    seen = capture_exp(monkeypatch)
    flash_attention(q, k, v, policy=policy, block_k=2 * TIE_DISTINCT, variant=variant)
    ones_before = [int((p == 1).sum(-1).min()) for p in seen]
    assert min(ones_before) >= 2  # without the fix every row of every tile holds several exact 1s
    seen.clear()
    flash_attention(q, k, v, policy=f"{policy},max_shift=qiu-yao", block_k=2 * TIE_DISTINCT, variant=variant)
    assert len(seen) == 96 // (2 * TIE_DISTINCT)
    assert all(int((p == 1).sum()) == 0 for p in seen)
    assert all(float(p.max()) < 1 for p in seen)


def golden_scores_max(q, k):
    return (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).amax(-1)


@pytest.mark.parametrize("case", [dict(block_k=8), dict(block_k=5, causal=True), dict(block_k=13, variant="fa1"),
                                  dict(block_k=8, kv_order="reverse")], ids=str)
def test_fp64_output_and_lse_unchanged(case):
    case = dict(case)
    causal = case.pop("causal", False)
    q, k, v = tied_qkv(logit=3.0)
    gold, gold_lse = golden_attention(q, k, v, is_causal=causal, return_lse=True)
    for shift in ("none", "qiu-yao"):
        out, lse = flash_attention(q, k, v, policy=f"fp64,max_shift={shift}", is_causal=causal, return_lse=True,
                                   **case)
        # float64 rounding of ~Tc additions of unit-scale terms; the shifted LSE adds 2|m| of cancellation
        tol_o = 64 * EPS64 * float(v.abs().max())
        tol_l = 64 * EPS64 * (float(gold_lse.abs().max()) + 2 * float(golden_scores_max(q, k).abs().max()))
        assert deviation(out, gold)["max_abs"] <= tol_o, (shift, deviation(out, gold)["max_abs"], tol_o)
        assert float((lse - gold_lse).abs().max()) <= tol_l, shift


def test_fp64_gradients_unchanged():
    q, k, v = (t.requires_grad_() for t in tied_qkv(N=29, S=40, logit=3.0))
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    want = torch.autograd.grad(golden_attention(q, k, v, is_causal=True), (q, k, v), do)
    for shift in ("none", "qiu-yao"):
        out = flash_attention(q, k, v, policy=f"fp64,max_shift={shift}", block_k=8, block_q=8, is_causal=True)
        got = torch.autograd.grad(out, (q, k, v), do)
        for name, a, b in zip(("dq", "dk", "dv"), got, want):
            tol = 64 * EPS64 * float(b.abs().max())
            assert float((a - b).abs().max()) <= tol, (shift, name)


def test_backward_delta_is_rowsum_do_o():
    q, k, v = tied_qkv(N=16, S=24)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out, lse = flash_attention(q, k, v, policy="fp64", block_k=8, return_lse=True)
    *_, delta = flash_backward(q, k, v, out, lse, do, scale=0.25, policy="fp64", Bc=8, return_delta=True)
    assert torch.equal(delta, (do * out).sum(-1))


@pytest.mark.parametrize("policy", ["uniform:bf16", "fa2:bf16", "fp32"])
@pytest.mark.parametrize("logit", [8.0, 25.0])
def test_shift_keeps_rows_normal_for_realistic_logits(policy, logit, monkeypatch):
    """2m with m up to ~80 (bf16 and fp32 share the exponent range): exp(s - 2m) <= e^-m is tiny but
    normal, so every row sum stays normal and the output stays as accurate as without the fix."""
    q, k, v = tied_qkv(logit=logit)
    m = golden_scores_max(q, k)
    assert 8 <= float(m.abs().max()) <= 87  # really large logits, below the limit
    pol = parse_policy(policy)
    q, k, v = (round_to(x, pol.inputs) for x in (q, k, v))
    gold = golden_attention(q, k, v)
    seen = capture_exp(monkeypatch)
    err = {}
    for shift in ("none", "qiu-yao"):
        seen.clear()
        err[shift] = deviation(flash_attention(q, k, v, policy=f"{policy},max_shift={shift}", block_k=8), gold)
    row_max = torch.stack([p.amax(-1) for p in seen]).amax(0)  # each row's largest P~ over its tiles
    assert float(row_max.min()) >= pol.exp.tiny  # normal: the row sum, >= its largest term, is too
    floor = 4 * pol.out.eps * float(gold.abs().max())
    assert err["qiu-yao"]["max_abs"] <= 2 * err["none"]["max_abs"] + floor, (err, floor)


@pytest.mark.parametrize("policy, logit", [("uniform:bf16", 60.0), ("uniform:fp16", 6.0)])
def test_no_shift_beyond_the_limit(policy, logit):
    """Where e^-|m| would leave the normal range of P~'s formats the rule keeps m: same bits as none."""
    _, k, v = tied_qkv()
    q = logit * k[:, :, :48]  # each query is a key: its maximum is logit * |k|^2 / sqrt(d), tied
    assert float(golden_scores_max(q, k).abs().min()) > steps.shift_limit(parse_policy(policy))
    a = flash_attention(q, k, v, policy=policy, block_k=8)
    b = flash_attention(q, k, v, policy=f"{policy},max_shift=qiu-yao", block_k=8)
    assert torch.equal(a, b) and torch.isfinite(a).all()


def test_trainable_path_carries_the_shift():
    """The autograd Function's forward is the shifted forward (same output bits as no-grad)."""
    q, k, v = tied_qkv(N=16, S=32)
    pol = "uniform:bf16,max_shift=qiu-yao"
    plain = flash_attention(q, k, v, policy=pol, block_k=8)
    qg = q.clone().requires_grad_()
    trained = attnum.flash_attention(qg, k, v, policy=pol, block_k=8)
    assert torch.equal(trained.detach(), plain)
    assert not torch.equal(plain, flash_attention(q, k, v, policy="uniform:bf16", block_k=8))
