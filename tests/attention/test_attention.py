"""golden, baseline and flash against float64 references; tolerances derived from the formats."""

import math
import os
import subprocess
import sys

import _paths
import pytest
import torch

from attnum import baseline_attention, flash_attention, golden_attention, round_to
from attnum.attention import masks
from attnum.attention.masks import causal_bool
from attnum.errors import AttnumInputError
from attnum.numerics.metrics import deviation
from attnum.numerics.policy import SITES, parse_policy, uniform
from attnum.workloads.inputs import InputSpec, make_qkv


def qkv(N=64, S=None, H=4, G=None, d=16, seed=0, device="cpu"):
    return make_qkv(InputSpec(heads=H, kv_heads=G, seq_len=N, kv_len=S, head_dim=d, seed=seed), device=device)


def reference(q, k, v, bias):
    """Textbook float64 attention on a (B, H, N, S) additive bias; empty rows -> 0."""
    H = q.shape[1]
    k = k.repeat_interleave(H // k.shape[1], dim=1)
    v = v.repeat_interleave(H // v.shape[1], dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    p = torch.softmax(s, dim=-1)
    return torch.nan_to_num(p, nan=0.0) @ v


def test_golden_matches_textbook_with_masks_and_gqa(device):
    q, k, v = qkv(N=37, S=53, H=6, G=2, device=device)
    keep = torch.rand(37, 53, generator=torch.Generator().manual_seed(1)) > 0.3
    keep[5] = False  # one fully masked row
    bias = torch.zeros(37, 53, dtype=torch.float64).masked_fill(~keep, -math.inf).to(device)
    out = golden_attention(q, k, v, attn_mask=keep.to(device))
    torch.testing.assert_close(out, reference(q, k, v, bias), rtol=0, atol=1e-14)
    assert torch.all(out[:, :, 5] == 0)
    add = torch.randn(1, 6, 37, 53, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).to(device)
    torch.testing.assert_close(golden_attention(q, k, v, attn_mask=add), reference(q, k, v, add), rtol=0, atol=1e-14)


def test_golden_causal_is_top_left_and_lse(device):
    q, k, v = qkv(N=20, S=30, device=device)
    bias = torch.zeros(20, 30, dtype=torch.float64, device=device).masked_fill(~causal_bool(20, 30, device=device), -math.inf)
    out, lse = golden_attention(q, k, v, is_causal=True, return_lse=True)
    torch.testing.assert_close(out, reference(q, k, v, bias), rtol=0, atol=1e-14)
    s = q @ k.transpose(-1, -2) / 4 + bias
    torch.testing.assert_close(lse, torch.logsumexp(s, dim=-1), rtol=0, atol=1e-13)


CASES = [
    dict(N=1, S=1, block_k=16),
    dict(N=63, S=65, block_k=16),
    dict(N=129, S=129, block_k=64, variant="fa1"),
    dict(N=100, S=1000, block_k=128, kv_order="reverse"),
    dict(N=65, S=65, block_k=8, kv_order="random:3", causal=True),
    dict(N=64, S=200, G=2, block_k=32, causal=True, variant="fa1"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_fp64_policy_matches_golden(case, device):
    case = dict(case)
    causal = case.pop("causal", False)
    q, k, v = qkv(N=case.pop("N"), S=case.pop("S"), G=case.pop("G", None), device=device)
    gold = golden_attention(q, k, v, is_causal=causal)
    flash = flash_attention(q, k, v, is_causal=causal, policy="fp64", **case)
    base = baseline_attention(q, k, v, is_causal=causal, policy="fp64")
    assert deviation(flash, gold)["max_abs"] <= 1e-12
    assert deviation(base, gold)["max_abs"] <= 1e-12


def test_fully_masked_rows_give_zero_and_minus_inf_lse():
    q, k, v = qkv(N=8, S=40)
    keep = torch.ones(8, 40, dtype=torch.bool)
    keep[2] = False
    keep[3, :17] = False  # first tiles of this row see nothing
    for policy in ("fp64", "fa2:bf16", "uniform:fp16"):
        for variant in ("fa1", "fa2"):
            out, lse = flash_attention(q, k, v, attn_mask=keep, policy=policy, block_k=8, variant=variant,
                                       return_lse=True)
            assert torch.all(out[:, :, 2] == 0) and torch.all(torch.isfinite(out))
            assert torch.all(lse[:, :, 2] == -math.inf)
        assert torch.all(baseline_attention(q, k, v, attn_mask=keep, policy=policy)[:, :, 2] == 0)


def test_every_site_is_a_rounding_site():
    """Coarsening one site at a time (everything else fp64) changes the result: no site is dead."""
    q, k, v = qkv(N=48, S=96)
    exact, exact_lse = flash_attention(q, k, v, policy="fp64", block_k=16, return_lse=True)
    base_exact = baseline_attention(q, k, v, policy="fp64")
    for site in SITES:
        pol = uniform("fp64").with_overrides(**{site: "e3m4"})
        out, lse = flash_attention(q, k, v, policy=pol, block_k=16, return_lse=True)
        if site == "lse":  # the stored LSE only: the output does not depend on it
            assert torch.equal(out, exact) and torch.equal(lse, round_to(exact_lse, "e3m4"))
            continue
        assert not torch.equal(out, exact), site
        if site != "rescale":  # the baseline has no online rescaling
            assert not torch.equal(baseline_attention(q, k, v, policy=pol), base_exact), site


def test_out_site_is_one_correct_rounding():
    q, k, v = qkv(N=32, S=64)
    pol = uniform("fp64").with_overrides(out="bf16")
    exact = flash_attention(q, k, v, policy="fp64", block_k=16)
    assert torch.equal(flash_attention(q, k, v, policy=pol, block_k=16), round_to(exact, "bf16"))


def test_only_bc_matters_in_the_forward():
    q, k, v = qkv(N=256, S=256)
    a = flash_attention(q, k, v, policy="uniform:bf16", block_q=16, block_k=64)
    b = flash_attention(q, k, v, policy="uniform:bf16", block_q=128, block_k=64)
    c = flash_attention(q, k, v, policy="uniform:bf16", block_q=16, block_k=32)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("N", [512, 2048])
def test_fa2_policy_within_flashattention_test_bound(fmt, N):
    """FlashAttention's own acceptance rule: err(flash) <= 2 err(baseline) + a few output ULPs."""
    q, k, v = qkv(N=N, H=2, d=64, seed=N)
    pol = parse_policy(f"fa2:{fmt}")
    q, k, v = (round_to(x, pol.inputs) for x in (q, k, v))
    gold = golden_attention(q, k, v)
    err_f = deviation(flash_attention(q, k, v, policy=pol, block_k=128), gold)["max_abs"]
    err_b = deviation(baseline_attention(q, k, v, policy=pol), gold)["max_abs"]
    floor = 4 * pol.out.eps * gold.abs().max().item()
    assert err_f <= 2 * err_b + floor, (err_f, err_b, floor)


def test_emulated_matmul_accumulator_matches_sequential_sum():
    q, k, v = qkv(N=4, S=8, H=1, d=16)
    pol = uniform("fp64").with_overrides(matmul_acc="fp16", reduction_chunk=4)
    from attnum.attention.steps import matmul

    got = matmul(q, k.transpose(-1, -2), pol)
    want = torch.zeros(1, 1, 4, 8, dtype=torch.float64)
    for c0 in range(0, 16, 4):
        part = (q[..., c0:c0 + 4, None] * k.transpose(-1, -2)[..., c0:c0 + 4, :].unsqueeze(-3)).sum(-2)
        want = round_to(want + part, "fp16")
    assert torch.equal(got, want)
    assert not torch.equal(got, q @ k.transpose(-1, -2))


def test_float32_carrier_for_narrow_policies():
    assert parse_policy("fa2:bf16").carrier == torch.float32
    assert parse_policy("uniform:e4m3fn").carrier == torch.float32
    assert parse_policy("uniform:e8m30").carrier == torch.float64
    assert parse_policy("fa2:bf16,matmul_acc=exact").carrier == torch.float64


@pytest.mark.parametrize("kwargs,match", [
    (dict(k=torch.zeros(1, 4, 8, 15)), "head dim"),
    (dict(attn_mask=torch.ones(3, 8, 8, dtype=torch.bool)), "attn_mask.shape"),
    (dict(k=torch.zeros(1, 3, 8, 16), v=torch.zeros(1, 3, 8, 16)), "kv heads"),
    (dict(block_k=0), "block_k=0"),
    (dict(variant="fa3"), "variant="),
    (dict(sram=1000, block_k=4), "sram="),
    (dict(kv_order="sideways"), "kv_order="),
    (dict(policy="fa9:bf16"), "policy="),
])
def test_bad_input_names_the_parameter(kwargs, match):
    args = dict(q=torch.zeros(1, 4, 8, 16), k=torch.zeros(1, 4, 8, 16), v=torch.zeros(1, 4, 8, 16))
    for name in ("k", "v"):
        if name in kwargs:
            args[name] = kwargs.pop(name)
    with pytest.raises(AttnumInputError, match=match):
        flash_attention(args["q"], args["k"], args["v"], **kwargs)


def test_nan_and_inf_are_data():
    q, k, v = qkv(N=8, S=8)
    v[0, 0, 3, 0] = math.nan
    out = flash_attention(q, k, v, policy="fa2:bf16", block_k=4)
    assert torch.isnan(out[0, 0, :, 0]).all() and torch.isfinite(out[0, 0, :, 1:]).all()


_PEAK = (
    "import sys, torch; from attnum import golden_attention, flash_attention\n"
    "def status(key):\n"
    "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(key))\n"
    "q = torch.randn(1, 1, 32768, 128, dtype=torch.float64)\n"
    "before = status('VmRSS:')\n"
    "fn = golden_attention if sys.argv[1] == 'golden' else flash_attention\n"
    "kw = {} if sys.argv[1] == 'golden' else {'policy': 'fa2:bf16'}\n"
    "out = fn(q, q, q, is_causal=True, **kw)\n"
    "assert torch.isfinite(out).all()\n"
    "print(status('VmHWM:') - before)\n"
)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc/self/status (Linux) to read peak RSS")
@pytest.mark.parametrize("impl,limit_mb", [("golden", 2048), ("flash", 1024)])
def test_long_causal_sequence_memory(impl, limit_mb):
    """N = S = 32768, d = 128, one head, causal: masks are cut per tile, never N x S (10 GB before)."""
    res = subprocess.run([sys.executable, "-c", _PEAK, impl], capture_output=True, text=True, timeout=_paths.HANG_S)
    assert res.returncode == 0, res.stderr
    extra_mb = int(res.stdout.strip().splitlines()[-1]) / 1024
    assert extra_mb < limit_mb, f"{impl}: extra peak RSS {extra_mb:.0f} MiB >= {limit_mb} MiB"


def test_nan_in_keys_propagates_not_zeroed():
    q, k, v = qkv(N=8, S=8)
    k[0, 0, 2, 0] = math.nan
    for fn in (golden_attention, baseline_attention, flash_attention):
        out = fn(q, k, v)
        assert torch.isnan(out[0, 0]).all(), fn.__name__
        assert torch.isfinite(out[0, 1:]).all(), fn.__name__


@pytest.mark.parametrize("policy", ["fp32", "fa2:bf16", "uniform:fp16"])
def test_power_of_two_prescale_is_bit_identical(policy):
    """Moving a power-of-two scale onto Q must not change a single bit of the scores."""
    from attnum.attention import steps

    pol = parse_policy(policy)
    q, k, _ = qkv(N=64, S=64, d=64)
    q, k = steps.load_input(q, pol), steps.load_input(k, pol)
    qs, post = steps.prescale(q, 0.125, pol)
    assert post == 1.0
    none = masks.Tile()
    assert torch.equal(steps.scores(qs, k, post, none, pol), steps.scores(q, k, 0.125, none, pol))
    assert steps.prescale(q, 1 / math.sqrt(128), pol)[1] == 1 / math.sqrt(128)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e4m3fn", "e5m2", "e2m1fn", "tf32", "bf16-nosub"])
@pytest.mark.parametrize("carrier", [torch.float32, torch.float64])
def test_in_place_site_rounding_equals_round_to(fmt, carrier):
    from attnum.attention.steps import round_site_
    from attnum.numerics.workspace import Workspace

    x = (torch.randn(4, 64, 33, generator=torch.Generator().manual_seed(5)) * 300).to(carrier)
    x[0, 0, :6] = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e-40, -1e6])
    pol = uniform(fmt)
    want = pol.round("probs", x.clone())
    ws = Workspace()
    for _ in range(2):  # buffers reused on the second call
        got = round_site_(pol, "probs", x.clone(), ws)
        assert torch.equal(got.isnan(), want.isnan())
        ok = ~want.isnan()  # a NaN's sign bit carries no meaning
        assert torch.equal(got[ok], want[ok]) and torch.equal(got[ok].signbit(), want[ok].signbit())


def test_zero_length_keys_give_zeros():
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    k = v = torch.zeros(1, 2, 0, 8, dtype=torch.float64)
    for fn in (golden_attention, baseline_attention, flash_attention):
        out = fn(q, k, v)
        assert out.shape == (1, 2, 5, 8) and torch.all(out == 0), fn.__name__
    _, lse = flash_attention(q, k, v, return_lse=True)
    assert torch.all(lse == -math.inf)


def test_autocast_does_not_change_the_policy():
    q, k, v = (x.float() for x in qkv(N=32, S=48))
    want = flash_attention(q, k, v, policy="fp32", block_k=16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = flash_attention(q, k, v, policy="fp32", block_k=16)
        base = baseline_attention(q, k, v, policy="fp32")
        gold = golden_attention(q, k, v)
    assert torch.equal(got, want)
    assert base.dtype == torch.float32 and gold.dtype == torch.float64


def test_golden_is_differentiable():
    q, k, v = (x.requires_grad_() for x in qkv(N=6, S=7, H=1, d=4))
    keep = torch.ones(6, 7, dtype=torch.bool)
    keep[2] = False
    assert torch.autograd.gradcheck(lambda a, b, c: golden_attention(a, b, c, attn_mask=keep), (q, k, v))


def _textbook(q, k, v, keep):
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~keep, -math.inf)
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return p @ v


@pytest.mark.parametrize("N,S", [(5, 13), (13, 5), (9, 9)])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("window", [None, (2, -1), (1, 3), (-1, 0)])
def test_alignment_and_window_match_the_textbook(N, S, alignment, window):
    """Causal alignment and sliding windows, cut per tile, give the textbook masked softmax in
    every implementation (fp64 policy: equal to golden to float64 rounding)."""
    g = torch.Generator().manual_seed(N * 31 + S)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (N, S, S))
    i = torch.arange(N)[:, None] + (0 if alignment == "top_left" else S - N)
    j = torch.arange(S)[None, :]
    keep = j <= i  # causal
    if window is not None:
        left, right = window
        if left >= 0:
            keep &= j >= i - left
        if right >= 0:
            keep &= j <= i + right
    want = _textbook(q, k, v, keep)
    kw = dict(is_causal=True, causal_alignment=alignment, window=window)
    gold = golden_attention(q, k, v, **kw)
    tol = 64 * 2.0**-52
    assert (gold - want).abs().max() <= tol
    for out in (baseline_attention(q, k, v, policy="fp64", **kw),
                flash_attention(q, k, v, policy="fp64", block_k=4, **kw),
                flash_attention(q, k, v, policy="fp64", block_k=3, variant="fa1", **kw)):
        assert (out - gold).abs().max() <= tol
    empty = ~keep.any(dim=-1)
    if bool(empty.any()):  # rows before the diagonal (bottom-right, N > S) are empty: zeros
        assert torch.equal(gold[..., empty, :], torch.zeros_like(gold[..., empty, :]))


def test_bad_alignment_and_window_are_one_line_errors():
    q = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    with pytest.raises(AttnumInputError, match="causal_alignment='diagonal'"):
        flash_attention(q, q, q, is_causal=True, causal_alignment="diagonal")
    with pytest.raises(AttnumInputError, match="window="):
        golden_attention(q, q, q, window=(2,))
