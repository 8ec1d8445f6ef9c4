"""Ring attention simulated in one process: exact in fp64, flash's accuracy under an fp32 merge,
fully masked rows exact, bad shard counts one line."""

from __future__ import annotations

import math

import pytest
import torch

from attnum import flash_attention, golden_attention
from attnum.attention.parallel.ring import RingPlan, block_state, ring_attention, shard_positions
from attnum.attention.serving.merge import empty_state, merge_state
from attnum.errors import AttnumInputError
from attnum.numerics.formats import get_format

U64 = get_format("fp64").eps / 2


def _qkv(N=360, H=4, G=2, d=32, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, H, N, d, generator=g).to(dtype), torch.randn(1, G, N, d, generator=g).to(dtype),
            torch.randn(1, G, N, d, generator=g).to(dtype))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("P,layout", [(1, "contiguous"), (3, "contiguous"), (4, "contiguous"), (3, "zigzag"),
                                      (2, "zigzag")])
def test_fp64_ring_is_golden(P, layout, causal, one_thread):
    """fp64 attention and fp64 merges: golden to float64 rounding, 2 (S + 4P) u max|v| (the merge
    test's bound with P states); N = 360 and Bc = 32 leave partial tiles in every shard."""
    q, k, v = _qkv(dtype=torch.float64)
    got, lse = ring_attention(q, k, v, is_causal=causal, policy="fp64", merge_policy="fp64", shards=P, layout=layout,
                              block_k=32, return_lse=True)
    want, want_lse = golden_attention(q, k, v, is_causal=causal, return_lse=True)
    err = float((got - want).abs().max())
    bound = 2 * (360 + 4 * P) * U64 * float(v.abs().max())
    print(f"P={P} {layout} causal={causal}: err={err:.3g} bound={bound:.3g}")
    assert err <= bound
    assert float((lse - want_lse).abs().max()) <= 2 * (360 + 4 * P) * U64 * float(want_lse.abs().max())


def test_one_shard_is_flash_bit_for_bit(one_thread):
    q, k, v = _qkv()
    for causal in (False, True):
        ring, lse = ring_attention(q, k, v, is_causal=causal, shards=1, return_lse=True)
        flash, flse = flash_attention(q, k, v, is_causal=causal, policy="fa2:bf16", return_lse=True)
        assert torch.equal(ring, flash) and torch.equal(lse, flse)


def test_fully_masked_rows_merge_exactly():
    """Zigzag, rank 0 holding rank 1's block: its first chunk sees no key (LSE -inf, O = 0); merging
    that state changes those rows not at all, and no NaN appears anywhere in any merge policy."""
    q, k, v = _qkv(N=256)
    pos = shard_positions(256, 2, "zigzag")
    plan = RingPlan(causal=True, scale=32**-0.5, policy="fa2:bf16", merge_policy="fp32")
    own = block_state(q[:, :, pos[0]], k[:, :, pos[0]], v[:, :, pos[0]], pos[0], pos[0], plan)
    blk = block_state(q[:, :, pos[0]], k[:, :, pos[1]], v[:, :, pos[1]], pos[0], pos[1], plan)
    assert bool((blk.lse[:, :, :64] == -math.inf).all()) and bool((blk.o[:, :, :64] == 0).all())
    assert bool(torch.isfinite(blk.lse[:, :, 64:]).all())
    merged = merge_state(own, blk, policy="fp32")
    base = merge_state(empty_state(own.lse.shape, 32), own, policy="fp32")  # own as the merge loads it
    assert torch.equal(merged.o[:, :, :64], base.o[:, :, :64])
    assert torch.equal(merged.lse[:, :, :64], base.lse[:, :, :64])
    for mp in ("fp32", "fp32,out=bf16", "bf16"):
        out = ring_attention(q, k, v, is_causal=True, shards=2, layout="zigzag", merge_policy=mp)
        assert not bool(torch.isnan(out).any()), mp


def test_deviation_against_shards_and_merge_policy(one_thread):
    """fa2:bf16 blocks: an fp32 merge stays within 2x single-device flash's max error against golden
    (flash-attention's own test rule); rounding the running output to bf16 after every step makes
    the mean error grow with the number of steps."""
    q, k, v = _qkv(N=512, H=2, G=2, d=64, seed=1)
    want = golden_attention(q, k, v, is_causal=True)
    flash = float((flash_attention(q, k, v, is_causal=True, policy="fa2:bf16").double() - want).abs().max())
    mean_bf16 = []
    for P in (2, 4, 8):
        for layout in ("contiguous", "zigzag"):
            ring = ring_attention(q, k, v, is_causal=True, shards=P, layout=layout, merge_policy="fp32")
            err = float((ring.double() - want).abs().max())
            print(f"P={P} {layout}: fp32 merge {err:.3g} flash {flash:.3g}")
            assert err <= 2 * flash
        ring = ring_attention(q, k, v, is_causal=True, shards=P, layout="zigzag", merge_policy="fp32,out=bf16")
        mean_bf16.append(float((ring.double() - want).abs().mean()))
    print("per-step bf16 mean error", mean_bf16)
    assert mean_bf16[0] < mean_bf16[1] < mean_bf16[2]


def test_bad_input_is_one_line():
    q, k, v = _qkv(N=1000)
    with pytest.raises(AttnumInputError, match=r"shards=3 .* N % \(2P\) == 0") as err:
        ring_attention(q, k, v, shards=3, layout="zigzag")
    assert "\n" not in str(err.value)
    with pytest.raises(AttnumInputError, match="shards=3"):
        ring_attention(q, k, v, shards=3)
    with pytest.raises(AttnumInputError, match="layout"):
        ring_attention(q, k, v, shards=2, layout="striped")
    with pytest.raises(AttnumInputError, match="attn_mask"):
        ring_attention(q, k, v, attn_mask=torch.ones(1000, 1000, dtype=torch.bool))
    with pytest.raises(AttnumInputError, match="kv length"):
        ring_attention(q, k[:, :, :500], v[:, :, :500])
    with pytest.raises(AttnumInputError, match="merge_method"):
        ring_attention(q, k, v, merge_method="sigmoid")


def test_cli_ring(capsys, one_thread, tmp_path):
    from attnum.cli import main

    assert main(["ring", "--seq-len", "256", "--shards", "2,4", "--heads", "2", "--merge-policy", "fp32",
                 "--merge-policy", "fp32,out=bf16", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "zigzag" in out and "ring-flash-attn: unavailable" in out and (tmp_path / "report.html").is_file()
    assert main(["ring", "--seq-len", "1000", "--shards", "3", "--layout", "zigzag"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "N % (2P) == 0" in err
    if not torch.cuda.is_available():
        assert main(["ring", "--backend", "ring-flash-attn"]) == 2
        assert "not available here" in capsys.readouterr().err
