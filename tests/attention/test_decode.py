"""attention/serving/decode.py: KV-cache decode, split-KV (flash-decoding), GQA/MQA, causal alignment.

Against the float64 reference (golden per sequence) with bounds derived from the formats; padding past
every sequence's end is NaN, so any read of it shows as NaN in the output.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnum.attention.serving.decode import decode_attention, decode_reference, split_bounds
from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format
from attnum.numerics.metrics import ulp

pytestmark = pytest.mark.usefixtures("one_thread")  # many tiny ops: one thread is faster

U64 = get_format("fp64").eps / 2
U_BF16 = get_format("bf16").eps / 2
NAN = math.nan


def cache(B=3, H=4, G=2, N=1, S=70, d=16, dv=8, lens=(70, 33, 0), seed=0, dtype=torch.float64):
    """q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv) with NaN past each sequence's length."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, N, d, generator=g, dtype=torch.float64) * 1.5
    k = torch.randn(B, G, S, d, generator=g, dtype=torch.float64)
    v = torch.randn(B, G, S, dv, generator=g, dtype=torch.float64)
    for b, L in enumerate(lens):
        k[b, :, L:] = NAN
        v[b, :, L:] = NAN
    return q.to(dtype), k.to(dtype), v.to(dtype), torch.tensor(lens)


def fp64_bound(v: torch.Tensor, S: int, splits: int) -> float:
    """Two float64 sums of S terms (relative error <= S u each), a few roundings per merged state."""
    return 2 * (S + 4 * splits) * U64 * float(v.nan_to_num().abs().max())


def bf16_bound(ref: torch.Tensor, v: torch.Tensor) -> float:
    """fa2:bf16 decode: P rounded to bf16 for the PV GEMM (relative u per term: <= u max|v| in all),
    the output rounded once to bf16 (half an ulp at the output's scale), fp32 elsewhere (~2^-20)."""
    vmax = float(v.nan_to_num().abs().max())
    return 0.5 * ulp(float(ref.abs().max()), "bf16") + U_BF16 * vmax + 2.0**-20 * vmax


@pytest.mark.parametrize("splits", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("N,alignment", [(1, "bottom_right"), (3, "bottom_right"), (3, "top_left")])
@pytest.mark.parametrize("G", [4, 2, 1], ids=lambda g: f"G={g}")
def test_fp64_decode_equals_the_reference(splits, N, alignment, G):
    q, k, v, lens = cache(G=G, N=N, lens=(70, 33, 2))
    kw = dict(cache_seqlens=lens, causal_alignment=alignment)
    ref, ref_lse = decode_reference(q, k, v, return_lse=True, **kw)
    out, lse = decode_attention(q, k, v, policy="fp64", num_splits=splits, block_k=8, return_lse=True, **kw)
    err, bound = float((out - ref).abs().max()), fp64_bound(v, 70, splits)
    print(f"err={err:.3g} bound={bound:.3g}")
    assert out.dtype == torch.float64 and not out.isnan().any()
    assert err <= bound
    fin = torch.isfinite(ref_lse)
    assert torch.equal(fin, torch.isfinite(lse))  # the same rows are empty (bottom-right, L < N)
    assert float((lse - ref_lse)[fin].abs().max()) <= 2 * (70 + 4 * splits) * U64 * float(ref_lse[fin].abs().max())


def test_empty_cache_and_rows_without_keys_are_zero_with_lse_minus_inf():
    q, k, v, lens = cache(N=3, lens=(0, 1, 70))
    out, lse = decode_attention(q, k, v, cache_seqlens=lens, num_splits=4, block_k=8, policy="fp64", return_lse=True)
    assert torch.equal(out[0], torch.zeros_like(out[0])) and bool((lse[0] == -math.inf).all())
    # L = 1, N = 3, bottom-right: query 2 sees key 0; queries 0 and 1 see nothing.
    assert bool((lse[1, :, :2] == -math.inf).all()) and torch.equal(out[1, :, :2], torch.zeros_like(out[1, :, :2]))
    assert torch.equal(out[1, :, 2], v[1].repeat_interleave(2, dim=0)[:, 0])  # one key: O = its V row exactly


@pytest.mark.parametrize("splits", [1, 2, 4, 8])
def test_bf16_decode_deviation_is_explained_by_the_format_for_every_split_count(splits):
    q, k, v, lens = cache(B=2, H=8, G=2, S=512, d=64, dv=64, lens=(512, 300), dtype=torch.bfloat16)
    ref = decode_reference(q, k, v, cache_seqlens=lens)
    out = decode_attention(q, k, v, cache_seqlens=lens, policy="fa2:bf16", num_splits=splits, block_k=64)
    err, bound = float((out - ref).abs().max()), bf16_bound(ref, v)
    print(f"splits={splits}: err={err:.3g} bound={bound:.3g}")
    assert out.dtype == torch.float32 and err <= bound
    assert torch.equal(out, out.bfloat16().float())  # the output lies on the bf16 grid


def test_output_bits_depend_on_num_splits_and_on_max_seqlen():
    """flash-attention#1647 / flashinfer#4647: the split cut changes the bits, not the accuracy."""
    q, k, v, lens = cache(B=2, H=8, G=2, S=512, d=64, dv=64, lens=(300, 253), dtype=torch.bfloat16)
    kw = dict(cache_seqlens=lens, policy="fa2:bf16", block_k=16)
    one = decode_attention(q, k, v, num_splits=1, **kw)
    many = decode_attention(q, k, v, num_splits=8, **kw)
    host = decode_attention(q, k, v, num_splits=8, max_seqlen=300, **kw)
    assert not torch.equal(one, many) and not torch.equal(many[1], host[1])
    assert float((one - many).abs().max()) <= 2 * bf16_bound(one, v)


def test_split_cut_follows_fa2_and_leaves_empty_splits():
    assert split_bounds(300, num_splits=4, max_seqlen=300, block_k=64) == [(0, 128), (128, 256), (256, 300),
                                                                           (384, 300)]
    assert split_bounds(10, num_splits=3, max_seqlen=512, block_k=64) == [(0, 10), (192, 10), (384, 10)]
    assert split_bounds(0, num_splits=1, max_seqlen=1, block_k=128) == [(0, 0)]


def test_one_live_split_merged_is_bitwise_the_unsplit_kernel():
    q, k, v, lens = cache(B=2, lens=(20, 5), dtype=torch.bfloat16)
    one = decode_attention(q, k, v, cache_seqlens=lens, policy="fa2:bf16", num_splits=1, block_k=32)
    split = decode_attention(q, k, v, cache_seqlens=lens, policy="fa2:bf16", num_splits=2, block_k=32)
    assert torch.equal(one, split)  # the second split is empty: (+) is exact on it


def test_causal_alignment_at_one_query():
    """Bottom-right at N = 1 is no mask (HF switches causal off there); top-left sees key 0 alone."""
    q, k, v, lens = cache(lens=(70, 33, 5))
    br = decode_attention(q, k, v, cache_seqlens=lens, policy="fp64", is_causal=True)
    off = decode_attention(q, k, v, cache_seqlens=lens, policy="fp64", is_causal=False)
    tl = decode_attention(q, k, v, cache_seqlens=lens, policy="fp64", is_causal=True, causal_alignment="top_left")
    assert torch.equal(br, off)
    assert torch.equal(tl[:, :, 0], v[:, :, 0].repeat_interleave(2, dim=1))


def test_gqa_mqa_equal_the_expanded_heads():
    q, k, v, lens = cache(H=8, G=1, lens=(70, 40, 9))
    mqa = decode_attention(q, k, v, cache_seqlens=lens, policy="fp64", num_splits=3, block_k=16)
    full = decode_attention(q, k.expand(3, 8, 70, 16), v.expand(3, 8, 70, 8), cache_seqlens=lens, policy="fp64",
                            num_splits=3, block_k=16)
    assert float((mqa - full).abs().max()) <= fp64_bound(v, 70, 3)


@pytest.mark.parametrize("base", ["e", 2])
def test_lse_base(base):
    q, k, v, lens = cache()
    _, ref = decode_reference(q, k, v, cache_seqlens=lens, return_lse=True)
    _, lse = decode_attention(q, k, v, cache_seqlens=lens, policy="fp64", num_splits=3, block_k=8, lse_base=base,
                              return_lse=True)
    want = ref if base == "e" else ref / math.log(2.0)
    fin = torch.isfinite(want)
    assert float((lse - want)[fin].abs().max()) <= 1e3 * U64 * float(want[fin].abs().max())


def test_float32_and_bf16_tensors_straight_in():
    q, k, v, lens = cache(dtype=torch.float32)
    out = decode_attention(q, k, v, cache_seqlens=lens.tolist(), num_splits=2)
    assert out.dtype == torch.float32 and out.shape == (3, 4, 1, 8) and not out.isnan().any()
    qb, kb, vb, _ = cache(dtype=torch.bfloat16)
    assert not decode_attention(qb, kb, vb, cache_seqlens=lens, policy="fa2:bf16", num_splits=3).isnan().any()


@pytest.mark.parametrize("kw,param", [
    ({"cache_seqlens": torch.tensor([70, -1, 0])}, "cache_seqlens=-1"),
    ({"cache_seqlens": torch.tensor([71, 1, 0])}, "cache_seqlens=71"),
    ({"cache_seqlens": torch.tensor([1.0, 2.0, 3.0])}, "cache_seqlens="),
    ({"num_splits": 0}, "num_splits=0"),
    ({"max_seqlen": 10}, "max_seqlen=10"),
    ({"block_k": 0}, "block_k=0"),
    ({"lse_base": 10}, "lse_base=10"),
    ({"causal_alignment": "middle"}, "causal_alignment='middle'"),
])
def test_bad_input_is_one_line_naming_the_parameter(kw, param):
    q, k, v, lens = cache()
    with pytest.raises(AttnumInputError) as err:
        decode_attention(q, k, v, **{"cache_seqlens": lens, **kw})
    assert param in str(err.value) and "\n" not in str(err.value)
