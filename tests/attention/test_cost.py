"""The cost model: FLOPs and bytes counted by hand for small configurations (exact integers)."""

import pytest

from attnum.attention.cost.devices import compare_costs, measure_cpu, summary
from attnum.attention.cost.model import DEVICES, CostConfig, Device, attention_cost, pairs
from attnum.errors import AttnumInputError


@pytest.mark.parametrize("N,S,causal,want", [(1, 10, True, 10), (5, 5, True, 15), (5, 5, False, 25),
                                             (3, 5, True, 3 + 4 + 5), (4, 2, True, 0 + 0 + 1 + 2)])
def test_pairs_are_bottom_right_causal(N, S, causal, want):
    assert pairs(N, S, causal) == want


def test_decode_bf16_gqa_by_hand():
    c = attention_cost(CostConfig(batch=2, heads=4, kv_heads=2, kv_len=10, head_dim=8))
    assert c.flops == 2 * 2 * 4 * 10 * (8 + 8) == 2560  # Q K^T and P V, one query per head
    assert c.bytes == {"out": 2 * 4 * 8 * 2, "q": 2 * 4 * 8 * 2, "kv": 2 * 2 * 2 * 10 * 8 * 2, "kv_scales": 0}
    assert c.total_bytes == 128 + 128 + 1280 and c.intensity == 2560 / 1536


def test_fp8_block_scaled_paged_decode_by_hand():
    c = attention_cost(CostConfig(batch=2, heads=4, kv_heads=2, kv_len=10, head_dim=8, kv_format="fp8_e4m3",
                                  kv_granularity="block", kv_block=4, page_size=4))
    assert c.config.kv_format == "e4m3fn"
    assert c.bytes["kv"] == 2 * 2 * 2 * 10 * 8 * 1 == 640
    assert c.bytes["kv_scales"] == 2 * 4 * (2 * 2 * 3)  # K and V, 4 bytes, B*G*ceil(10/4) scales each
    assert c.bytes["page_table"] == 2 * 3 * 4  # ceil(10/4) int32 entries per sequence
    assert c.total_bytes == 128 + 128 + 640 + 96 + 24
    tok = attention_cost(CostConfig(batch=2, heads=4, kv_heads=2, kv_len=10, head_dim=8, kv_format="int8",
                                    kv_granularity="token"))
    assert tok.bytes["kv_scales"] == 2 * 4 * 2 * 2 * 10


def test_prefill_causal_by_hand():
    c = attention_cost(CostConfig(mode="prefill", heads=2, kv_len=5, head_dim=4, compute="fp8", kv_format="fp8"))
    assert c.config.N == 5 and c.flops == 2 * 2 * 15 * 8
    assert c.bytes["q"] == 2 * 5 * 4 * 1 and c.bytes["kv"] == 2 * 2 * 5 * 4 and c.bytes["kv_scales"] == 8


def test_mla_by_hand():
    kw = dict(heads=2, kv_len=3, head_dim=4, mla_rank=6, rope_dim=2)
    ab = attention_cost(CostConfig(**kw, absorbed=True))
    # attention over r + dr keys and r values per head, plus q_nope W_UK^T and o_latent W_UV
    assert ab.flops == 2 * 2 * (3 * ((6 + 2) + 6) + 4 * 6 + 6 * 4) == 360
    assert ab.bytes["kv"] == 3 * (6 + 2) * 2 and ab.bytes["weights"] == 2 * 6 * 8 * 2
    assert ab.bytes["intermediates"] == 2 * 2 * (8 + 6) * 2
    ex = attention_cost(CostConfig(**kw, absorbed=False))
    assert ex.flops == 2 * 2 * (3 * 6 * 8 + 3 * ((4 + 2) + 4)) == 696
    assert ex.bytes["intermediates"] == 2 * 2 * 3 * (6 + 4) * 2


def test_fp8_ds_mla_is_656_bytes_per_token():
    """FlashMLA's README: 512 e4m3 NoPE values, 4 fp32 scales, 64 bf16 RoPE values per token."""
    c = attention_cost(CostConfig(heads=128, kv_len=7, mla_rank=512, kv_format="fp8_ds_mla"))
    assert c.bytes["kv"] + c.bytes["kv_scales"] == 7 * 656
    bf = attention_cost(CostConfig(heads=128, kv_len=7, mla_rank=512, kv_format="bf16"))
    assert bf.bytes["kv"] == 7 * 576 * 2 and bf.bytes["kv_scales"] == 0
    e5 = attention_cost(CostConfig(heads=128, kv_len=7, mla_rank=512, kv_format="e5m2", kv_granularity="token"))
    assert e5.bytes["kv"] == 7 * (512 + 2 * 64) and e5.bytes["kv_scales"] == 4 * 7


def test_roofline_and_compare_rows():
    toy = Device("toy", {"bf16": 1000.0}, 10.0, "hand")
    c = attention_cost(CostConfig(batch=2, heads=4, kv_heads=2, kv_len=10, head_dim=8))
    assert c.time(toy) == max(2560 / 1000, 1536 / 10) and c.bound(toy) == "memory"
    fast = Device("fast-mem", {"bf16": 1000.0}, 1e6, "hand")
    assert c.time(fast) == 2.56 and c.bound(fast) == "compute"
    assert attention_cost(CostConfig(compute="fp8")).time(DEVICES["A100"]) is None  # no FP8 GEMM on A100
    base = CostConfig(batch=8, heads=32, kv_heads=8, kv_len=32768, name="bf16 KV")
    fp8 = CostConfig(batch=8, heads=32, kv_heads=8, kv_len=32768, kv_format="e4m3fn", name="FP8 KV")
    rows = compare_costs([base, fp8], devices=("H100", toy), errors=[1e-3, 4e-3])
    b0, b1 = (attention_cost(x).total_bytes for x in (base, fp8))
    h = rows[1]["devices"]["H100 SXM"]
    assert h["bound"] == "memory" and h["speedup"] == pytest.approx(b0 / b1, rel=1e-15)
    assert rows[1]["error_ratio"] == 4.0 and rows[0]["devices"]["toy"]["speedup"] == 1.0
    assert summary(rows[1], "H100 SXM").startswith("FP8 KV: decode bound 2.00x faster on H100 SXM (memory-bound)")


def test_measured_cpu_is_cached_and_positive():
    cpu = measure_cpu()
    assert cpu is measure_cpu() and cpu.bandwidth > 0 and cpu.peak("bf16") > 0 and cpu.peak("e4m3fn") > 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(mode="train"), "mode="), (dict(heads=6, kv_heads=4), "kv_heads="), (dict(mla_rank=4097), "mla_rank="),
    (dict(page_size=0), "page_size="), (dict(kv_format="fp4"), "kv_format="), (dict(kv_format="fp8_ds_mla"), "kv_format="),
    (dict(kv_granularity="row"), "kv_granularity="), (dict(compute="int8"), "compute="),
])
def test_bad_cost_config(kwargs, match):
    with pytest.raises(AttnumInputError, match=match):
        CostConfig(**kwargs)


def test_kv_cost_table_pairs_each_cache_error_with_its_cost():
    from attnum.attention import flash_attention, golden_attention
    from attnum.attention.lowbit.quant import quantize_kv_cache
    from attnum.numerics.metrics import deviation
    from attnum.studies.serving.kv_cost import FORMATS, KVCostConfig, run_kv_cost_table
    from attnum.workloads.inputs import InputSpec, make_qkv

    cfg = KVCostConfig(heads=2, kv_heads=1, kv_len=64, head_dim=16)
    rows = run_kv_cost_table(cfg, devices=("H100",))
    assert [r["name"] for r in rows] == [f[0] for f in FORMATS] and rows[0]["error_ratio"] == 1.0
    q, k, v = make_qkv(InputSpec(heads=2, kv_heads=1, seq_len=1, kv_len=64, head_dim=16))
    kd, vd = quantize_kv_cache(k, v, FORMATS[2][1]).dequantize("bf16")
    want = deviation(flash_attention(q, kd, vd, policy="fa2:bf16", block_k=128), golden_attention(q, k, v))["rmse"]
    assert rows[2]["error"] == want and rows[2]["config"]["kv_granularity"] == "head"
    assert rows[2]["devices"]["H100 SXM"]["speedup"] > 1
