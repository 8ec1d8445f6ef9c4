"""KV-cache formats for decode: error against float64 golden beside the roofline cost, one table.

Error: one decode step (N = 1 query per head, causal bottom-right is then every key) over an S-token
cache, seeded N(0, 1) (or outlier) inputs; the cache is quantized (:func:`quantize_kv_cache`),
dequantized to bf16 in the kernel (as vLLM does before QK^T) and attended under ``fa2:bf16``.
The bf16 row stores the cache in bf16. Cost: :func:`attnum.attention.cost.model.compare_costs` at the (larger)
``cost_shape`` -- the issue's decode benchmark shape, B = 8, H = 32, G = 8, S = 32768, d = 128.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnum.attention import flash_attention, golden_attention
from attnum.attention.cost.devices import compare_costs
from attnum.attention.cost.model import CostConfig
from attnum.attention.lowbit.quant import Quantization, quantize_kv_cache
from attnum.numerics.metrics import deviation
from attnum.workloads.inputs import InputSpec, make_qkv

# (name, Quantization or None for a bf16 cache, cost-model kv_format)
FORMATS = (
    ("bf16 KV", None, "bf16"),
    ("FP8 e4m3 KV, scale 1.0", Quantization(fmt="e4m3fn", scale=1.0), "e4m3fn"),
    ("FP8 e4m3 KV, per-head calibrated", Quantization(fmt="e4m3fn", granularity="head"), "e4m3fn"),
    ("FP8 e5m2 KV, per-head calibrated", Quantization(fmt="e5m2", granularity="head"), "e5m2"),
    ("int8 KV, per-token calibrated", Quantization(fmt="int8", granularity="token"), "int8"),
)


@dataclass(frozen=True, kw_only=True)
class KVCostConfig:
    heads: int = 32
    kv_heads: int = 8
    kv_len: int = 4096
    head_dim: int = 128
    dist: str = "normal"
    seed: int = 0
    cost_shape: dict = field(default_factory=lambda: dict(batch=8, heads=32, kv_heads=8, kv_len=32768, head_dim=128))


def run_kv_cost_table(cfg: KVCostConfig, devices=("A100", "H100", "H200"), cpu: bool = False) -> list[dict]:
    """compare_costs rows (first = bf16 cache) with ``error`` = RMSE vs golden and ``error_ratio``."""
    spec = InputSpec(heads=cfg.heads, kv_heads=cfg.kv_heads, seq_len=1, kv_len=cfg.kv_len, head_dim=cfg.head_dim,
                     dist=cfg.dist, seed=cfg.seed)
    q, k, v = make_qkv(spec)
    gold = golden_attention(q, k, v)
    errors, configs, overflow = [], [], []
    for name, quant, kv_format in FORMATS:
        if quant is None:
            kd, vd, over = k, v, 0  # rounded to bf16 by the policy's inputs site
        else:
            cache = quantize_kv_cache(k, v, quant)
            (kd, vd), over = cache.dequantize("bf16"), cache.overflow
        out = flash_attention(q, kd, vd, policy="fa2:bf16", block_k=128)
        errors.append(deviation(out, gold)["rmse"])
        overflow.append(over)
        gran = quant.granularity if quant is not None else "tensor"
        configs.append(CostConfig(**cfg.cost_shape, kv_format=kv_format, kv_granularity=gran, name=name))
    rows = compare_costs(configs, devices=devices, errors=errors, cpu=cpu)
    for r, over in zip(rows, overflow):
        r["overflow"] = over
    return rows
