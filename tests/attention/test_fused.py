"""Fused flash tile steps (attnum.attention.fused) against the unfused reference step, bit for bit.

The reference is the same flash forward with ATTNUM_JIT=0 (torch ops, one per pass). Policy presets, site
overrides, emulated matmul accumulation, both variants, every mask kind (causal both alignments,
window, bool, additive with -inf and fully masked rows), GQA, Qiu-Yao's shift, NaN/inf inputs.
"""

import pytest
import torch

from attnum import flash_attention
from attnum.attention import fused
from attnum.attention.serving.decode import decode_attention
from attnum.numerics import jit
from attnum.numerics.policy import parse_policy

pytestmark = pytest.mark.skipif(not jit.enabled(), reason="numba not importable")

PRESETS = ["fp32", "fp64", "fa2:bf16", "fa2:fp16", "uniform:bf16", "uniform:e4m3fn", "uniform:e5m2",
           "torch-eager:bf16", "torch-cpu:fp16", "uniform:bf16-nosub", "uniform:e3m2fn"]
OVERRIDES = ["fa2:bf16,acc=fp16,probs=e4m3fn", "uniform:fp16,scores=bf16,row_sum=e5m2,rescale=e4m3fn",
             "fa2:bf16,matmul_acc=bf16,reduction_chunk=8", "fa2:fp16,normalize=divide", "uniform:bf16,max_shift=qiu-yao",
             "fa2:bf16,exp=bf16,out=e4m3fn", "fp32,lse=bf16", "fa2:e4m3fn,max_shift=qiu-yao,normalize=divide",
             "fa4:bf16", "fa2:fp16,rescale_threshold=2", "uniform:bf16,exp2=poly5,max_shift=qiu-yao"]
MASKS = ["none", "causal", "bottom_right", "window", "bool", "additive"]


def _inputs(mask: str, seed: int, special: bool = False):
    g = torch.Generator().manual_seed(seed)
    B, H, G, N, S, d = 2, 4, 2, 19, 37, 16  # GQA (4 query heads on 2 kv heads); partial last tiles
    q = torch.randn(B, H, N, d, generator=g) * 2
    k, v = (torch.randn(B, G, S, d, generator=g) for _ in range(2))
    if special:
        q[0, 1, 3, 2], k[1, 0, 5, 1], v[0, 1, 7, 0] = float("nan"), float("inf"), float("-inf")
    kw = {}
    if mask == "causal":
        kw = dict(is_causal=True)
    elif mask == "bottom_right":
        kw = dict(is_causal=True, causal_alignment="bottom_right")
    elif mask == "window":
        kw = dict(window=(5, 3))
    elif mask == "bool":
        m = torch.rand(B, 1, N, S, generator=g) > 0.3
        m[0, 0, 4] = False  # a fully masked row: O = 0, lse = -inf
        kw = dict(attn_mask=m)
    elif mask == "additive":
        m = torch.randn(N, S, generator=g)
        m[m > 1.2] = float("-inf")
        m[2] = float("-inf")
        kw = dict(attn_mask=m)
    return q, k, v, kw


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    nan = a.isnan()
    return (torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan])
            and torch.equal(a[~nan].signbit(), b[~nan].signbit()))


def _both(monkeypatch, fn):
    fused_out = fn()
    with monkeypatch.context() as m:
        m.setenv("ATTNUM_JIT", "0")
        ref = fn()
    return fused_out, ref


def _check(policy, variant, mask, seed, monkeypatch, special=False, block_k=8):
    assert fused.why_unfused(parse_policy(policy)) is None
    q, k, v, kw = _inputs(mask, seed, special)
    (o1, l1), (o2, l2) = _both(monkeypatch, lambda: flash_attention(
        q, k, v, policy=policy, variant=variant, block_k=block_k, return_lse=True, **kw))
    assert _same_bits(o1, o2), f"{policy} {variant} {mask}: outputs differ"
    assert _same_bits(l1, l2), f"{policy} {variant} {mask}: lse differ"


@pytest.mark.parametrize("variant", ["fa2", "fa1"])
@pytest.mark.parametrize("policy", PRESETS + OVERRIDES)
def test_fused_equals_unfused(policy, variant, monkeypatch):
    i = (PRESETS + OVERRIDES).index(policy)
    _check(policy, variant, MASKS[i % len(MASKS)], seed=i, monkeypatch=monkeypatch)


@pytest.mark.parametrize("variant", ["fa2", "fa1"])
@pytest.mark.parametrize("mask", MASKS)
def test_fused_equals_unfused_every_mask(mask, variant, monkeypatch):
    for policy in ("fa2:bf16", "uniform:e4m3fn,max_shift=qiu-yao"):
        _check(policy, variant, mask, seed=len(mask), monkeypatch=monkeypatch, block_k=16)


@pytest.mark.parametrize("policy", ["fp32", "fa2:bf16", "uniform:e4m3fn"])
def test_fused_equals_unfused_nan_inf_inputs(policy, monkeypatch):
    for variant in ("fa2", "fa1"):
        _check(policy, variant, "causal", seed=1, monkeypatch=monkeypatch, special=True)


def test_decode_split_kv_equal(monkeypatch):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 8, 1, 16, generator=g)
    kc, vc = (torch.randn(2, 2, 64, 16, generator=g) for _ in range(2))
    lens = torch.tensor([64, 23])
    a, b = _both(monkeypatch, lambda: decode_attention(q, kc, vc, cache_seqlens=lens, policy="fa2:bf16",
                                                        num_splits=3, block_k=8))
    assert _same_bits(a, b)


@pytest.mark.parametrize("policy, reason", [("sage1:bf16", fused.UNFUSED[2]), ("sage3:fp16", fused.UNFUSED[2])])
def test_unfused_policies_are_named(policy, reason, monkeypatch):
    assert fused.why_unfused(parse_policy(policy)) == reason
    assert fused.why_unfused(parse_policy("fa2:bf16"), "cuda") == fused.UNFUSED[1]
    monkeypatch.setenv("ATTNUM_JIT", "0")
    assert fused.why_unfused(parse_policy("fa2:bf16")) == fused.UNFUSED[0]


@pytest.mark.parametrize("policy", ["fp32", "fa2:bf16", "uniform:e4m3fn", "fa2:fp16,probs=e5m2,scores=bf16"])
def test_fused_backward_equals_unfused(policy, monkeypatch):
    """Gradients (dQ, dK, dV) through the recomputing backward, fused and unfused, GQA and masks."""
    for i, mask in enumerate(("causal", "additive", "bool")):
        q, k, v, kw = _inputs(mask, seed=10 + i)
        do = torch.randn(q.shape[:-1] + (v.shape[-1],), generator=torch.Generator().manual_seed(i))

        def grads():
            leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
            out = flash_attention(*leaves, policy=policy, block_k=8, block_q=8, **kw)
            out.backward(do.to(out.dtype))
            return [t.grad for t in leaves]

        got, want = _both(monkeypatch, grads)
        for name, a, b in zip("qkv", got, want):
            assert _same_bits(a, b), f"{policy} {mask}: d{name} differs"


@pytest.mark.parametrize("mask", ["bottom_right", "additive", "window"])
def test_thread_count_changes_no_bit(mask, monkeypatch):
    """Query rows in blocks (flash_forward.row_block) run on 1 or 3 threads (attention.blocks): same bits."""
    from attnum.attention import blocks, flash_forward

    q, k, v, kw = _inputs(mask, seed=7)
    monkeypatch.setattr(flash_forward, "ROW_BLOCK_ELEMS", 2 * 4 * 8 * 5)  # 5 rows per block of B=2, H=4, Bc=8
    run = lambda: flash_attention(q, k, v, policy="fa2:bf16,max_shift=qiu-yao", block_k=8, return_lse=True, **kw)
    with monkeypatch.context() as m:
        m.setattr(blocks, "threads_for", lambda n, device: 1)
        want = run()
    monkeypatch.setattr(blocks, "threads_for", lambda n, device: 1 if blocks.in_worker() else min(n, 3))
    got = run()
    assert _same_bits(got[0], want[0]) and _same_bits(got[1], want[1])


SPECIAL_ROWS = [[1.0, float("nan"), 3.0], [float("-inf")] * 3, [float("-inf"), -0.0, float("-inf")],
                [-2.0, -1e-40, -3.0], [float("inf"), 1.0, float("nan")], [5e-324, 0.0, -5e-324],
                [-1.0, float("-nan"), -2.0], [3.4e38, float("inf"), -3.4e38], [-7.5, -7.25, -7.5]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_max_is_torch_amax(dtype):
    """The compiled shift pass's row max (integer keys of the IEEE bits) equals torch's amax on every row:
    NaN of either sign, +-inf, all -inf, subnormals, random rows of both signs (zeros' sign aside: it
    never reaches an output)."""
    import numpy as np

    from attnum.attention.fused_kernels import shift_

    g = torch.Generator().manual_seed(7)
    rows = torch.randn(200, 37, generator=g, dtype=torch.float64) * torch.logspace(-30, 30, 200, dtype=torch.float64)[:, None]
    s = torch.cat([torch.tensor([r + [0.5] * 34 for r in SPECIAL_ROWS], dtype=torch.float64), rows]).to(dtype)
    s[:len(SPECIAL_ROWS), 3:] = s[:len(SPECIAL_ROWS), :1].expand(-1, 34)  # the special rows' own values only
    want = s.amax(dim=-1)
    work = s.clone().numpy()
    m_blk = np.empty(s.shape[0], work.dtype)
    shift_(work, work.view(np.int32 if dtype == torch.float32 else np.int64), m_blk, m_blk.copy(), False, False,
           work.dtype.type(0), work.dtype.type(0))
    got = torch.from_numpy(m_blk)
    assert torch.equal(got.isnan(), want.isnan())
    ok = ~want.isnan()
    assert torch.equal(got[ok], want[ok])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_prescale_range_compiled_equals_torch(dtype, monkeypatch):
    """prescale's (max |q|, min nonzero |q|) from the compiled pass equals torch's reductions, NaN, inf,
    zeros and subnormals included."""
    from attnum.attention import steps

    cases = [torch.tensor(x, dtype=dtype) for x in ([0.0, -0.0], [1.0, float("nan"), -3.0], [float("-inf"), 2.0],
                                                   [1e-45, -3.0, 0.0], [5e-324, 1.0], [-2.5, 0.0, 7.0])]
    cases.append(torch.randn(1000, dtype=dtype))
    for x in cases:
        got = steps._abs_range(x)
        monkeypatch.setenv("ATTNUM_JIT", "0")
        want = steps._abs_range(x)
        monkeypatch.delenv("ATTNUM_JIT")
        for a, b in zip(got, want):
            assert (a != a and b != b) or a == b, (x, got, want)
