"""The recomputing FlashAttention backward against float64 autograd, the same-precision baseline,
and PyTorch's own CPU flash backward.

Bound (flash-attention's test rule): err(flash grad vs golden) <= 2 * err(same-precision baseline vs
golden) + a floor of 4 ULPs of the output format at the gradient's scale; the three numbers are
printed on failure.
"""

from __future__ import annotations

import math

import pytest
import torch

import attnum
from attnum.attention import baseline_attention, golden_attention, masks
from attnum.attention.flash_backward import flash_backward
from attnum.studies.paper.compare import CompareConfig
from attnum.studies.paper.grad_compare import GRADS, run_grad_compare


def _check_bound(result: dict, impl: str = "flash", ref: str = "baseline") -> None:
    for gr in GRADS:
        err = result["metrics"][f"{impl}_vs_golden"][gr]["max_abs"]
        base = result["metrics"][f"{ref}_vs_golden"][gr]["max_abs"]
        # deviation() reports max_ulp = max_abs / ulp(max |golden grad|) in the out format.
        m = result["metrics"][f"{impl}_vs_golden"][gr]
        unit = m["max_abs"] / m["max_ulp"] if m["max_ulp"] else 0.0
        bound = 2 * base + 4 * unit
        assert err <= bound, f"{gr}: {impl} err {err:.3e} > bound {bound:.3e} (2 x {ref} {base:.3e} + 4 ulp)"


CASES = [
    {"policy": "fa2:bf16", "causal": False},
    {"policy": "fa2:bf16", "causal": True},
    {"policy": "uniform:bf16", "causal": False},
    {"policy": "fa2:fp16", "causal": True},
    {"policy": "uniform:fp16", "causal": False},
    {"policy": "fp32", "causal": True},
    {"policy": "uniform:e4m3fn", "causal": False},
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"policy={c['policy']}-causal={c['causal']}")
def test_grads_meet_same_precision_baseline_bound(case):
    # N = 200 is not a multiple of the tiles; GQA 4 query heads on 2 KV heads.
    cfg = CompareConfig(policy=case["policy"], seq_len=200, kv_len=176, head_dim=32, heads=4, kv_heads=2,
                        block_q=48, block_k=40, causal=case["causal"], seed=3)
    _check_bound(run_grad_compare(cfg))


@pytest.mark.parametrize("policy", ["torch-cpu:bf16", "torch-cpu:fp16", "fp32"])
def test_grads_validated_against_torch_cpu_flash_backward(policy):
    """The re-implementation's gradient error stays within 2x PyTorch's CPU flash kernel's (+4 ULP)."""
    cfg = CompareConfig(policy=policy, seq_len=256, head_dim=64, heads=2, block_k=64, causal=True, seed=1)
    result = run_grad_compare(cfg)
    _check_bound(result, ref="torch_flash")
    _check_bound(result, impl="torch_flash", ref="flash")  # and vice versa: neither is far worse


def _explicit_fp64(q, k, v, attn_mask=None, is_causal=False):
    H = q.shape[1]
    k, v = masks.expand_kv(k, H), masks.expand_kv(v, H)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask
    if is_causal:
        s = s.masked_fill(~masks.causal_bool(*s.shape[-2:]), -math.inf)
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return p @ v


@pytest.mark.parametrize("kv_order", ["forward", "reverse", "random:3"])
@pytest.mark.parametrize("mask", ["bool", "additive", "none"])
def test_fp64_policy_matches_autograd(kv_order, mask):
    """Under the fp64 policy the recomputing backward is float64 autograd up to float64 rounding."""
    g = torch.Generator().manual_seed(0)
    B, H, G, N, S, d = 2, 4, 2, 29, 37, 8
    q = torch.randn(B, H, N, d, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, G, S, d, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, G, S, d, generator=g, dtype=torch.float64, requires_grad=True)
    attn_mask = {"bool": torch.rand(N, S, generator=g) > 0.3,
                 "additive": torch.randn(B, 1, N, S, generator=g, dtype=torch.float64),
                 "none": None}[mask]
    do = torch.randn(B, H, N, d, generator=g, dtype=torch.float64)
    got = torch.autograd.grad(attnum.flash_attention(q, k, v, attn_mask=attn_mask, policy="fp64", block_q=8,
                                                     block_k=5, kv_order=kv_order), (q, k, v), do)
    want = torch.autograd.grad(_explicit_fp64(q, k, v, attn_mask=attn_mask), (q, k, v), do)
    for name, a, b in zip(GRADS, got, want):
        tol = 64 * torch.finfo(torch.float64).eps * float(b.abs().max())
        assert float((a - b).abs().max()) <= tol, name


def test_gradcheck_fp64():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    fn = lambda q, k, v: attnum.flash_attention(q, k, v, policy="fp64", block_k=3, is_causal=True)
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_fully_masked_rows_give_zero_grads_not_nan():
    q, k, v = (torch.randn(1, 1, 6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    keep = torch.ones(6, 6, dtype=torch.bool)
    keep[2] = False  # query row 2 sees no key
    out = attnum.flash_attention(q, k, v, attn_mask=keep, policy="fa2:bf16", block_k=4)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert all(torch.isfinite(t).all() for t in (dq, dk, dv))
    assert torch.equal(dq[0, 0, 2], torch.zeros(4, dtype=torch.float64))


def test_backward_never_builds_full_score_matrix(monkeypatch):
    """Every score tile the backward recomputes is at most Bc keys wide."""
    from attnum.attention import steps

    widths = []
    real = steps.scores

    def spy(q, k, *a, **kw):
        widths.append(k.shape[-2])
        return real(q, k, *a, **kw)

    monkeypatch.setattr(steps, "scores", spy)
    from attnum.attention import fused

    real_fused = fused.backward_tile

    def spy_fused(q, k, *a):  # the compiled tile step (same bits as the unfused one)
        widths.append(k.shape[-2])
        return real_fused(q, k, *a)

    monkeypatch.setattr(fused, "backward_tile", spy_fused)
    B, H, N, S, d = 1, 2, 64, 100, 8
    q, k, v, do = (torch.randn(B, H, n, d, dtype=torch.float64) for n in (N, S, S, N))
    out, lse = attnum.golden_attention(q, k, v, return_lse=True)
    widths.clear()
    flash_backward(q, k, v, out, lse, do, scale=d**-0.5, policy="fp32", Bc=16)
    assert widths and max(widths) <= 16 and len(widths) == math.ceil(S / 16)


def test_trainable_from_float32_inputs_returns_input_dtype_grads():
    q, k, v = (torch.randn(2, 2, 9, 8, requires_grad=True) for _ in range(3))
    out = attnum.flash_attention(q, k, v, policy="fa2:bf16", block_k=4)
    out.sum().backward()
    assert q.grad.dtype == torch.float32 and k.grad.shape == k.shape


@pytest.mark.parametrize("spec", ["flash:fa2:bf16", "baseline:uniform:bf16"])
def test_autocast_does_not_change_the_emulated_arithmetic(spec):
    """Under bf16 autocast the float32 carrier's matmuls must stay float32 (forward and backward)."""
    from attnum.kernels.registry import require

    fn = require(spec, block_k=4).fn
    g = torch.Generator().manual_seed(2)
    base = [torch.randn(1, 2, 9, 8, generator=g).to(torch.bfloat16) for _ in range(3)]
    grads = []
    for autocast in (False, True):
        qkv = [t.clone().requires_grad_() for t in base]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = fn(*qkv, is_causal=True)
        out.float().square().sum().backward()
        grads.append((out.detach(), *(t.grad for t in qkv)))
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_grad_compare_result_shape_for_the_cli():
    from attnum.studies.paper.grad_compare import grad_rows

    r = run_grad_compare(CompareConfig(policy="fa2:bf16", seq_len=64, head_dim=16, heads=2, block_k=16))
    assert set(r["ratio"]) == set(GRADS) and all(r["ratio"][g]["max_abs"] > 0 for g in GRADS)
    pairs = {"flash_vs_golden", "baseline_vs_golden", "torch_eager_vs_golden", "torch_flash_vs_golden",
             "flash_vs_baseline", "flash_vs_torch_flash"}
    assert set(r["metrics"]) == pairs
    assert len(grad_rows(r)) == 3 * len(pairs)


def test_learned_mask_is_refused_rather_than_silently_frozen():
    q = torch.randn(1, 1, 4, 4, requires_grad=True)
    bias = torch.zeros(4, 4, requires_grad=True)
    with pytest.raises(ValueError, match="attn_mask.requires_grad"):
        attnum.flash_attention(q, q, q, attn_mask=bias, policy="fp32")


@pytest.mark.parametrize("policy", ["fa2:bf16,matmul_acc=fp16,reduction_chunk=4", "uniform:e4m3fn", "fa2:fp16", "fp64"])
def test_differentiable_baseline_is_the_baseline(policy):
    """With autograd on, baseline_attention computes the same bits as without (every policy field
    honoured, matmul accumulators included), and its gradients are finite on fully masked rows."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (9, 13, 13))
    keep = torch.ones(1, 1, 9, 13, dtype=torch.bool)
    keep[..., 4, :] = False  # one empty row
    plain = baseline_attention(q, k, v, attn_mask=keep, is_causal=True, policy=policy)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = baseline_attention(*leaves, attn_mask=keep, is_causal=True, policy=policy)
    assert torch.equal(out.detach(), plain)
    grads = torch.autograd.grad(out.sum(), leaves)
    assert all(torch.isfinite(gr).all() for gr in grads)
    assert torch.equal(grads[0][..., 4, :], torch.zeros_like(grads[0][..., 4, :]))


def test_golden_gradients_are_float64_autograd_of_the_textbook():
    """golden_attention is differentiated directly (no op-by-op copy): its gradients match float64
    autograd of the textbook formula to float64 accuracy, causal with a fully masked row."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (7, 7, 7))
    do = torch.randn(1, 2, 7, 8, generator=g, dtype=torch.float64)
    a = [t.clone().requires_grad_() for t in (q, k, v)]
    b = [t.clone().requires_grad_() for t in (q, k, v)]
    ga = torch.autograd.grad(golden_attention(*a, is_causal=True), a, do)
    gb = torch.autograd.grad(_explicit_fp64(*b, is_causal=True), b, do)
    for x, y in zip(ga, gb):
        assert (x - y).abs().max() <= 64 * 2.0**-52 * max(1.0, y.abs().max().item())
