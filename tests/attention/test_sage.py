"""SageAttention emulation: the kernels' quantizers bit for bit, the tiled kernel against its plain
reference and the float64 golden value, the sage policies, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnum.attention import baseline_attention, flash_attention, golden_attention
from attnum.attention.lowbit.sage import sage_attention, sage_reference
from attnum.attention.lowbit.sage_quant import group_ids, quantize_groups, round_half_away
from attnum.errors import AttnumInputError
from attnum.numerics.lowbit import SAGE, LowBit
from attnum.numerics.policy import parse_policy


def test_round_half_away_matches_fp32_arithmetic():
    """Every half-integer and its fp32 neighbours in [-128, 128], plus a sweep: trunc(y + 0.5 sign(y)) in float32."""
    h = np.arange(-256, 257, dtype=np.float32) / np.float32(2)
    y = np.concatenate([h, np.nextafter(h, np.float32(np.inf)), np.nextafter(h, np.float32(-np.inf)),
                        np.linspace(-127.4, 127.4, 20001, dtype=np.float32)])
    want = np.trunc(y + np.where(y >= 0, np.float32(0.5), np.float32(-0.5)).astype(np.float32))
    got = round_half_away(torch.from_numpy(y).double()).numpy()
    assert np.array_equal(got, want.astype(np.float64))


def _kernel_groups_q(n, blk):  # quant_query_per_thread_int8_kernel: offs_n = off_blk * BLK + arange(BLK // 8) * 8 + off_tld
    return [[b * blk + i * 8 + t for i in range(blk // 8)] for b in range(n // blk) for t in range(8)]


def _kernel_groups_k(n, blk):  # quant_key_per_thread_int8_kernel: rows 8i + 2t and 8i + 2t + 1
    return [sorted([b * blk + i * 8 + t * 2 + o for i in range(blk // 8) for o in (0, 1)])
            for b in range(n // blk) for t in range(4)]


def _partition(ids: torch.Tensor) -> list[list[int]]:
    return sorted([torch.nonzero(ids == g).flatten().tolist() for g in ids.unique()])


def test_per_thread_groups_are_the_kernels_rows():
    lb = LowBit(granularity="thread")
    ids, n = group_ids(256, lb, "q")
    assert n == 64 and _partition(ids) == sorted(_kernel_groups_q(256, 32))
    ids, n = group_ids(256, lb, "k")
    assert n == 16 and _partition(ids) == sorted(_kernel_groups_k(256, 64))
    assert group_ids(256, LowBit(granularity="warp"), "q")[1] == 8
    assert group_ids(256, LowBit(granularity="block"), "q")[1] == 2
    assert group_ids(256, LowBit(granularity="block"), "k")[1] == 4


@pytest.mark.parametrize("gran", ["block", "thread"])
def test_int8_quantizer_matches_the_kernel_in_float32(gran):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(1, 2, 128, 16, generator=g) * 3).double()  # fp32 values
    lb = LowBit(granularity=gran)
    vals, tok_scale = quantize_groups(x, lb, "k", "int8")
    ids, _ = group_ids(128, lb, "k")
    xs = x.float().numpy()
    for h in range(2):
        for grp in ids.unique().tolist():
            rows = (ids == grp).numpy()
            blk = xs[0, h, rows]
            scale = np.float32(np.abs(blk).max()) / np.float32(127.0)
            if gran == "thread":
                scale = np.float32(scale + np.float32(1e-7))
            y = blk / scale
            want = np.trunc(y + np.where(y >= 0, np.float32(0.5), np.float32(-0.5)).astype(np.float32))
            assert np.array_equal(vals[0, h, rows].numpy(), want.astype(np.float64))
            assert float(tok_scale[0, h, rows][0, 0]) == float(scale)


def _qkv(seed=0, N=256, d=64, kbias=0.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, N, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, N, d, generator=g, dtype=torch.float64) + kbias * torch.randn(d, generator=g,
                                                                                         dtype=torch.float64)
    v = torch.randn(1, 2, N, d, generator=g, dtype=torch.float64)
    return q, k, v


@pytest.mark.parametrize("name", sorted(SAGE))
def test_tiled_kernel_close_to_its_plain_reference(name):
    """The two see the same quantized Q, K, V; they differ by P's rounding per tile and the MMA
    accumulator: within (tiles + 2) roundings of the accumulator/P format at the output scale."""
    q, k, v = _qkv()
    lb = SAGE[name]
    o = sage_attention(q, k, v, lowbit=lb, policy=f"{name}:fp16")
    ref = sage_reference(q, k, v, lowbit=lb, policy=f"{name}:fp16")
    unit = {"fp16": 2**-11, "e4m3fn": 2**-4, "nvfp4": 2**-2}[lb.pv]
    tol = (256 // lb.block_k + 2) * unit * float(v.abs().max())
    assert float((o - ref).abs().max()) <= tol
    assert not torch.equal(o, ref)  # the tiled kernel's own roundings are there


def test_exact_formats_give_the_golden_value():
    """Integer Q, K with amax 127 and a softmax scale whose fp32 product with the kernels' log2(e) is
    2**-10: Q * scale and both int8 quantizations are exact, Q K^T is exact in int32, so the scores
    are the golden scores in log2 units; with P V in fp32 the one coarse step left is P rounded to
    fp16 (relative 2**-11), so the output is within 2**-11 * max|v| of the float64 golden value."""
    g = torch.Generator().manual_seed(3)
    q = torch.randint(-8, 9, (1, 1, 64, 16), generator=g).double()
    k = torch.randint(-8, 9, (1, 1, 64, 16), generator=g).double()
    q[..., 0, 0], k[..., 0, 0] = 127, 127
    v = torch.randn(1, 1, 64, 16, generator=g, dtype=torch.float64).float().double()
    scale = 2.0**-10 / 1.44269504
    assert float(np.float32(scale * 1.44269504)) == 2.0**-10
    lb = LowBit(qk="int8", granularity="tensor", smooth_k=False, pv="fp16", pv_acc="fp32")
    o = sage_reference(q, k, v, lowbit=lb, policy="fa2:fp32", scale=scale)
    gold = golden_attention(q, k, v, scale=scale * 1.44269504 / float(np.log2(np.e)))
    assert float((o - gold).abs().max()) <= 2**-11 * float(v.abs().max())
    off = golden_attention(q, k, v, scale=1.5 * scale * 1.44269504 / float(np.log2(np.e)))
    assert float((o - off).abs().max()) > 2**-11 * float(v.abs().max())  # the check can fail


def test_smoothing_k_removes_the_channel_bias_error():
    q, k, v = _qkv(kbias=8.0)
    gold = golden_attention(q, k, v)
    on = baseline_attention(q, k, v, policy="sage1:fp16")
    off = baseline_attention(q, k, v, policy="sage1:fp16,smooth_k=0")
    assert float((on - gold).norm()) < 0.5 * float((off - gold).norm())


def test_sage_policies_parse_and_run_through_flash_and_baseline():
    p = parse_policy("sage2:bf16,granularity=warp,smooth_q=1")
    assert p.lowbit.granularity == "warp" and p.lowbit.smooth_q and p.inputs.name == "bf16"
    assert p.describe()["lowbit"]["pv_acc"] == "fp22"
    q, k, v = _qkv(N=128)
    o = flash_attention(q, k, v, policy="sage1:fp16", is_causal=True)
    ref = baseline_attention(q, k, v, policy="sage1:fp16", is_causal=True)
    assert float((o - ref).abs().max()) < 0.01


@pytest.mark.parametrize("spec, match", [
    ("sage1:fp16,granularity=warpish", r"^granularity='warpish' is not allowed; expected one of"),
    ("sage1:fp16,granularity=thread,warp_q=12", r"^warp_q=12 is not allowed; expected a multiple of 8"),
    ("sage1:fp16,granularity=warp,warp_q=48", r"^warp_q=48 is not allowed; expected a divisor of block_q=128"),
    ("sage1:fp16,pv=fp8", r"^pv='fp8' is not allowed"),
    ("sage1:fp16,block_k=0", r"^block_k=0 is not allowed; expected a positive integer"),
    ("fa2:fp16,granularity=thread", r"granularity needs a sage policy"),
])
def test_bad_lowbit_input(spec, match):
    with pytest.raises(AttnumInputError, match=match):
        parse_policy(spec)


def test_block_formats_need_dividing_shapes():
    q, k, v = _qkv(N=96, d=40)
    with pytest.raises(AttnumInputError, match=r"^head_dim=40 is not allowed; expected a multiple of nvfp4's block"):
        flash_attention(q, k, v, policy="sage3:fp16")
    q, k, v = _qkv(N=40, d=32)
    with pytest.raises(AttnumInputError, match=r"^kv_len=40 is not allowed; expected a multiple of 16"):
        flash_attention(q, k, v, policy="sage3:fp16")
