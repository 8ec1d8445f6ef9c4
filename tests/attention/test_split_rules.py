"""Split rules against cases worked by hand from their public sources (the source line each exercises
is named), and the decode plumbing that takes them."""

from __future__ import annotations

import pytest
import torch

from attnum.attention.serving.decode import decode_attention, decode_reference
from attnum.attention.serving.paged import paged_decode_attention, to_pages
from attnum.attention.serving.split_rules import (
    fa2_block_n,
    fa2_cut,
    fa2_num_splits_heuristic,
    fixed_cut,
    parse_split_rule,
    plan_splits,
    sglang_cut,
    sglang_num_kv_splits,
)
from attnum.errors import AttnumInputError

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- flash-attn 2, csrc/flash_attn/flash_api.cpp -------------------------------------------------------

def test_fa2_returns_one_split_when_the_blocks_nearly_fill_the_sms():
    # `if (batch_nheads_mblocks >= 0.8f * num_SMs) { return 1; }`: 0.8 * 264 = 211.2
    assert fa2_num_splits_heuristic(212, 264, 16, 128) == 1


def test_fa2_skips_ineligible_counts_and_takes_the_smallest_within_85_percent():
    # 211 blocks, 264 slots, 16 KV blocks: efficiencies n_waves / ceil(n_waves) are 0.799 for s = 1..4;
    # s = 5 and 7 are ineligible (ceil(16/5) == ceil(16/4) == 4; ceil(16/7) == ceil(16/6) == 3); s = 6
    # gives 1266/264 = 4.795 -> 0.959; the best is s = 16 (3376/264 = 12.79 -> 0.984); 0.85 * 0.984 = 0.836,
    # and 6 is the smallest eligible count at or above it (the `efficiency[...] >= 0.85 * max_efficiency` loop).
    assert fa2_num_splits_heuristic(211, 264, 16, 128) == 6


def test_fa2_source_comment_example_two_splits_for_48_heads_on_108_sms():
    # The comment above num_splits_heuristic: batch * n_heads = 48 on 108 SMs, 2 splits (0.89) beat 1 (0.44).
    assert fa2_num_splits_heuristic(48, 108, 2, 128) == 2


@pytest.mark.parametrize("d,block_n", [(32, 256), (64, 256), (96, 128), (128, 128), (256, 64)])
def test_fa2_block_n_from_head_dim(d, block_n):
    # set_params_splitkv: `block_n = max_head_size <= 64 ? 256 : (max_head_size <= 128 ? 128 : 64)`
    assert fa2_block_n(d) == block_n


def test_fa2_decode_plan_swaps_gqa_heads_and_cuts_by_the_host_bound():
    # mha_fwd_kvcache swaps (N=1, H=32) -> (N=4, G=8): 8 * ceil(4/64) = 8 blocks; n_blocks = ceil(1024/128) = 8;
    # eligible counts 1, 2, 3, 4, 8 with efficiency 8s/264 rising, so s = 8; split span ceil(8/8) * 128 = 128.
    plan = plan_splits("fa2", lens=[1000], heads=32, kv_heads=8, head_dim=128, max_seqlen=1024)
    assert plan.bounds[0] == tuple((128 * s, min(128 * (s + 1), 1000)) for s in range(8))
    assert plan.block_k == 128 and plan.merge_method == "lse"
    assert plan.kv_order == "reverse"  # flash_fwd_kernel.h: `for (; n_block >= n_block_min; --n_block)`
    # 132 sequences fill the SMs: 132 * 8 >= 211.2, one split.
    assert len(plan_splits("fa2", lens=[1000] * 132, heads=32, kv_heads=8, head_dim=128).bounds[0]) == 1
    assert fa2_cut(100, num_splits=4, max_seqlen=1024, block_n=128)[1:] == ((256, 100), (512, 100), (768, 100))


# ---- FlashInfer PR #1675 (fixed_split_size), SGLang PR #10425 and metadata.py, vLLM unified attention --

def test_flashinfer_fixed_size_cuts_every_prefix_the_same_way():
    assert fixed_cut(4097, 2048) == ((0, 2048), (2048, 4096), (4096, 4097))
    for L in (2049, 3000, 4096):
        assert fixed_cut(L, 2048)[0] == (0, 2048)


def test_sglang_fixed_tile_rounds_each_split_up_to_min_block_kv():
    # triton_backend.py (deterministic): num_kv_splits = ceil(L / 256); decode_attention.py:
    # kv_len_per_split = ceil(ceil(L / n) / 32) * 32. L = 300: n = 2, ceil(150 / 32) * 32 = 160.
    plan = plan_splits("sglang-fixed:256", lens=[300], heads=8, kv_heads=8, head_dim=64)
    assert plan.bounds[0] == ((0, 160), (160, 300))
    assert sglang_cut(257, 2) == ((0, 160), (160, 257))  # ceil(257/2) = 129 -> 160
    assert sglang_cut(256, 1) == ((0, 256),)


def test_sglang_default_splits_depend_on_the_batch():
    # metadata.py get_num_kv_splits_triton, H = G = 8 (token_grid = B * H), 132 cores, max_kv_splits 8:
    # L = 1000 for all: s1 = 1; ext_cores = int(132 * log2(1000 / 64)) = int(132 * 3.966) = 523;
    # B = 2: token_grid 16, s2 = min(ceil(523 / 16), 8) = 8, chunk 125 -> 8 splits;
    # B = 64: token_grid 512, s2 = ceil(523 / 512) = 2, chunk 500 -> 2 splits.
    kw = dict(heads=8, kv_heads=8, max_kv_splits=8, core_count=132)
    assert sglang_num_kv_splits([1000] * 2, **kw) == [8, 8]
    assert sglang_num_kv_splits([1000] * 64, **kw) == [2] * 64
    # `if max_seq_len * 8 < min_seq_len * 10: min_seq_len = max_seq_len` (lengths within 25%): s1 stays 1.
    assert sglang_num_kv_splits([1000, 900] * 32, **kw) == [2, 2] * 32
    # [1000, 100]: s1 = min(ceil(1000 / 100), 8) = 8, chunk1 = 125: the short one gets ceil(100/125) = 1,
    # or ceil(100 / chunk2) with chunk2 = 125 (B = 2): 1.
    assert sglang_num_kv_splits([1000, 100], **kw) == [8, 1]


def test_vllm_switches_from_3d_segments_to_2d_past_the_threshold():
    # triton_attn.py: seq_threshold_3D = 128 // num_kv_heads = 64; use_3d unless num_seqs > threshold.
    # 3D: tiles_per_segment = ceil(L / (16 * 16)); L = 1000 -> 4 tiles of 16 = 64 keys per segment.
    p3 = plan_splits("vllm", lens=[1000] * 64, heads=8, kv_heads=2, head_dim=64)
    assert p3.bounds[0] == tuple((64 * s, min(64 * s + 64, 1000)) for s in range(16)) and p3.block_k == 16
    # `if segm_idx * tiles_per_segment * TILE_SIZE >= seq_len: return`: L = 100 has 7 live segments of 16.
    assert len(plan_splits("vllm", lens=[100], heads=8, kv_heads=2, head_dim=64).bounds[0]) == 7
    p2 = plan_splits("vllm", lens=[1000] * 65, heads=8, kv_heads=2, head_dim=64)
    assert p2.bounds[0] == ((0, 1000),) and p2.block_k == 32
    assert plan_splits("vllm-invariant", lens=[1000], heads=8, kv_heads=2, head_dim=64).bounds[0] == ((0, 1000),)


@pytest.mark.parametrize("spec", ["nope", "fa2:12", "count:x", "vllm:sms=3", "count:0"])
def test_bad_rules_fail_with_one_line(spec):
    with pytest.raises(AttnumInputError) as e:
        parse_split_rule(spec)
    assert "\n" not in str(e.value) and "split_rule" in str(e.value)


# ---- the decode entry points take a rule ---------------------------------------------------------------

def _inputs(B=3, H=4, G=2, S=600, d=64):
    g = torch.Generator().manual_seed(5)
    return (torch.randn(B, H, 1, d, generator=g).bfloat16(), torch.randn(B, G, S, d, generator=g).bfloat16(),
            torch.randn(B, G, S, d, generator=g).bfloat16(), torch.tensor([600, 333, 17]))


def test_a_count_rule_is_the_num_splits_path_bit_for_bit():
    q, k, v, lens = _inputs()
    a = decode_attention(q, k, v, cache_seqlens=lens, policy="fa2:bf16", num_splits=4, merge_method="lse")
    b = decode_attention(q, k, v, cache_seqlens=lens, policy="fa2:bf16", split_rule="count:4")
    assert torch.equal(a, b)
    with pytest.raises(AttnumInputError, match="num_splits"):
        decode_attention(q, k, v, cache_seqlens=lens, num_splits=2, split_rule="fa2")


@pytest.mark.parametrize("rule", ["fa2", "flashinfer:128", "sglang-fixed:256", "sglang", "vllm"])
def test_every_rule_in_fp64_matches_golden(rule):
    # fp64 everywhere: each partial and the merge are exact to a few fp64 ulps; 64 eps bounds a sum of 600.
    q, k, v, lens = _inputs()
    gold = decode_reference(q, k, v, cache_seqlens=lens)
    o = decode_attention(q, k, v, cache_seqlens=lens, policy="fp64", split_rule=rule)
    assert float((o - gold).abs().max()) <= 64 * torch.finfo(torch.float64).eps


def test_a_fixed_size_rule_is_batch_invariant_and_the_heuristic_is_not():
    q, k, v, lens = _inputs()
    alone = {r: decode_attention(q[:1], k[:1], v[:1], cache_seqlens=lens[:1], policy="fa2:bf16", split_rule=r)
             for r in ("flashinfer:128", "fa2")}
    big = 200  # a batch of 200 fills the SMs: fa2 stops splitting; the plan of the first sequence changes
    plan = {r: plan_splits(r, lens=[600] + [17] * (big - 1), heads=4, kv_heads=2, head_dim=64).select([0])
            for r in alone}
    inside = {r: decode_attention(q[:1], k[:1], v[:1], cache_seqlens=lens[:1], policy="fa2:bf16", split_rule=plan[r])
              for r in alone}
    assert torch.equal(alone["flashinfer:128"], inside["flashinfer:128"])
    lone = plan_splits("fa2", lens=[600], heads=4, kv_heads=2, head_dim=64)
    assert len(plan["fa2"].bounds[0]) == 1 < len(lone.bounds[0])
    assert not torch.equal(alone["fa2"], inside["fa2"])


def test_paged_takes_the_rule_and_matches_contiguous_at_the_same_tile():
    q, k, v, lens = _inputs()
    kp, table = to_pages(k, 16, cache_seqlens=lens, seed=1)
    vp, _ = to_pages(v, 16, cache_seqlens=lens, seed=1)
    paged = paged_decode_attention(q, kp, vp, block_table=table, cache_seqlens=lens, policy="fa2:bf16",
                                   split_rule="vllm")
    contiguous = decode_attention(q, k, v, cache_seqlens=lens, policy="fa2:bf16", split_rule="vllm")  # tile 16
    assert torch.equal(paged, contiguous)


def test_a_sub_batch_plan_gives_the_whole_batchs_row_bit_for_bit():
    # The consistency study computes only its request's row under the whole batch's plan.
    q, k, v, lens = _inputs()
    plan = plan_splits("sglang", lens=lens.tolist(), heads=4, kv_heads=2, head_dim=64)
    whole = decode_attention(q, k, v, cache_seqlens=lens, policy="fa2:bf16", split_rule=plan)
    for b in range(3):
        row = decode_attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], cache_seqlens=lens[b:b + 1], policy="fa2:bf16",
                               split_rule=plan.select([b]))
        assert torch.equal(row[0], whole[b])


def test_a_decode_point_takes_a_split_rule_as_an_axis():
    from attnum.studies.serving.decode import DecodeConfig, run_decode

    out = run_decode(DecodeConfig(split_rule="vllm", cache_len=300, batch=2, heads=4, kv_heads=2, head_dim=64))
    # B = 2 <= 128 // 2: 3D; tiles_per_segment = ceil(300 / 256) = 2 -> 32 keys a segment, ceil(300 / 32) = 10 live
    assert out["tiles"]["split_rule"] == "vllm" and out["tiles"]["splits"] == 10 and out["tiles"]["Bc"] == 16
    with pytest.raises(AttnumInputError, match="split_rule"):
        DecodeConfig(split_rule="nope")


def test_a_decode_points_split_rule_is_stored_only_when_set():
    # Older stores hold decode configs without the field: their keys must not change.
    from attnum.studies.serving.inference import DecodePoint
    from attnum.sweep.registry import point_from_config

    plain, ruled = DecodePoint(), DecodePoint(split_rule="fa2")
    assert "split_rule" not in plain.config() and ruled.config()["split_rule"] == "fa2"
    assert point_from_config(ruled.config()).key == ruled.key != plain.key
