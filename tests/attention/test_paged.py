"""attention/serving/paged.py: a block table into a page pool, gathered as a kernel does.

Pages are placed at shuffled ids; every slot that holds no key (past each sequence's end, spare pages)
and every unused block-table entry's page is NaN, so any read of padding shows in the output.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnum.attention.serving.decode import decode_attention, decode_reference
from attnum.attention.serving.paged import (
    block_table_from_csr,
    paged_decode_attention,
    paged_decode_reference,
    to_pages,
)
from attnum.errors import AttnumInputError
from attnum.numerics.metrics import ulp

pytestmark = pytest.mark.usefixtures("one_thread")  # many tiny ops: one thread is faster

LENS = (300, 129, 5, 0)


def paged(P, dtype=torch.float64, lens=LENS, G=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    B, S = len(lens), max(lens)
    q = torch.randn(B, 4, 2, 16, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(B, G, S, 16, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(B, G, S, 8, generator=g, dtype=torch.float64).to(dtype)
    kp, table = to_pages(k, P, cache_seqlens=lens, spare_pages=2, seed=seed)
    vp, _ = to_pages(v, P, cache_seqlens=lens, spare_pages=2, seed=seed)
    return q, k, v, kp, vp, table, torch.tensor(lens)


@pytest.mark.parametrize("P", [1, 3, 16, 64, 256])
@pytest.mark.parametrize("policy", ["fp64", "fa2:bf16"])
@pytest.mark.parametrize("splits", [1, 3])
def test_paged_is_bitwise_contiguous_decode_at_the_same_tiles(P, policy, splits):
    dtype = torch.float64 if policy == "fp64" else torch.bfloat16
    q, k, v, kp, vp, table, lens = paged(P, dtype)
    assert kp.isnan().any()  # padding and spare pages are poisoned
    out = paged_decode_attention(q, kp, vp, block_table=table, cache_seqlens=lens, policy=policy, num_splits=splits)
    want = decode_attention(q, k, v, cache_seqlens=lens, policy=policy, num_splits=splits, block_k=P,
                            max_seqlen=table.shape[1] * P)
    assert not out.isnan().any() and torch.equal(out, want)


@pytest.mark.parametrize("P,block_k", [(16, 64), (64, 16), (1, 32)])
def test_tiles_of_whole_pages_or_pages_of_whole_tiles(P, block_k):
    q, k, v, kp, vp, table, lens = paged(P)
    out = paged_decode_attention(q, kp, vp, block_table=table, cache_seqlens=lens, policy="fp64", block_k=block_k,
                                 num_splits=2)
    want = decode_attention(q, k, v, cache_seqlens=lens, policy="fp64", block_k=block_k, num_splits=2,
                            max_seqlen=table.shape[1] * P)
    assert torch.equal(out, want)


def test_reference_and_hnd_layout():
    q, k, v, kp, vp, table, lens = paged(16)
    ref = paged_decode_reference(q, kp, vp, block_table=table, cache_seqlens=lens)
    assert torch.equal(ref, decode_reference(q, k, v, cache_seqlens=lens))
    hnd = paged_decode_attention(q, kp.transpose(1, 2).contiguous(), vp.transpose(1, 2).contiguous(),
                                 block_table=table, cache_seqlens=lens, kv_layout="HND", policy="fp64")
    assert torch.equal(hnd, paged_decode_attention(q, kp, vp, block_table=table, cache_seqlens=lens, policy="fp64"))


@pytest.mark.parametrize("P", [1, 16, 64, 256])
def test_bf16_deviation_against_page_size_is_explained_by_the_format(P):
    q, k, v, kp, vp, table, lens = paged(P, torch.bfloat16, lens=(512, 300), G=4)
    ref = decode_reference(q, k, v, cache_seqlens=lens)
    out = paged_decode_attention(q, kp, vp, block_table=table, cache_seqlens=lens, policy="fa2:bf16")
    vmax = float(v.abs().max())
    bound = 0.5 * ulp(float(ref.abs().max()), "bf16") + 2.0**-9 * vmax + 2.0**-20 * vmax  # as in test_decode
    err = float((out - ref).abs().max())
    print(f"P={P}: err={err:.3g} bound={bound:.3g}")
    assert err <= bound


def test_flashinfer_csr_page_list_converts_to_a_block_table():
    table, lens = block_table_from_csr([0, 3, 3, 4], [7, 2, 5, 0], [5, 1, 16], page_size=16)
    assert lens.tolist() == [37, 0, 16]
    assert table.tolist() == [[7, 2, 5], [0, 0, 0], [0, 0, 0]]
    with pytest.raises(AttnumInputError, match="kv_last_page_len"):
        block_table_from_csr([0, 1], [3], [17], page_size=16)


@pytest.mark.parametrize("change,param", [
    (lambda a: a.update(block_k=24), "block_k=24"),
    (lambda a: a["block_table"].__setitem__((1, 2), 99), "block_table[1, 2]=99"),
    (lambda a: a["block_table"].__setitem__((0, 0), -1), "block_table[0, 0]=-1"),
    (lambda a: a.update(cache_seqlens=torch.tensor([300, 129, -1, 0])), "cache_seqlens[2]=-1"),
    (lambda a: a.update(cache_seqlens=torch.tensor([400, 129, 5, 0])), "cache_seqlens[0]=400"),
    (lambda a: a.update(block_table=a["block_table"].float()), "block_table="),
    (lambda a: a.update(kv_layout="NCHW"), "kv_layout='NCHW'"),
    (lambda a: a.update(lse_base="ten"), "lse_base='ten'"),
])
def test_bad_input_is_one_line_naming_the_parameter(change, param):
    q, k, v, kp, vp, table, lens = paged(16)
    args = {"block_table": table.clone(), "cache_seqlens": lens}
    change(args)
    with pytest.raises(AttnumInputError) as err:
        paged_decode_attention(q, kp, vp, **args)
    assert param in str(err.value) and "expected" in str(err.value) and "\n" not in str(err.value)


def test_entries_past_a_sequence_are_never_read():
    """vLLM pads block tables with 0 or -1: entries past a sequence's ceil(L / P) pages are not page ids."""
    q, k, v, kp, vp, table, lens = paged(16)
    junk = table.clone()
    for b, L in enumerate(lens.tolist()):
        junk[b, math.ceil(L / 16):] = 10_000 if b % 2 else -1
    assert (junk != table).any()
    kw = dict(cache_seqlens=lens, policy="fp64", num_splits=2)
    assert torch.equal(paged_decode_attention(q, kp, vp, block_table=junk, **kw),
                       paged_decode_attention(q, kp, vp, block_table=table, **kw))
