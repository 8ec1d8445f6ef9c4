"""MLA explicit vs absorbed, per latent-cache format: deviation from float64 golden, and what each costs.

Inputs (seeded, float64): q_nope, q_rope, c_KV, k_R ~ N(0, 1) (DeepSeek normalizes c_KV with an
RMSNorm, so unit-scale entries), W_UK, W_UV ~ N(0, 1/r) (so K_h and V_h have unit-scale entries).
Defaults are DeepSeek-V3's per-layer shapes (r = 512, dn = 128, dr = 64, dv = 128) with 16 heads and a
1024-token cache, decode (N = 1). Each path runs under ``fa2:bf16`` with 64-key tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnum.attention.cost.model import CostConfig, attention_cost
from attnum.attention.lowbit.quant import Quantization
from attnum.attention.serving.mla import check_rank, mla_attention, mla_golden
from attnum.errors import bad_value
from attnum.numerics.metrics import deviation

# (label, cache argument of mla_attention, cost-model kv_format)
CACHES = (
    ("bf16", "bf16", "bf16"),
    ("fp8_ds_mla (e4m3, scale per token per 128)", "fp8_ds_mla", "fp8_ds_mla"),
    ("e4m3fn, per-tensor calibrated scale", Quantization(fmt="e4m3fn"), "e4m3fn"),
    ("e4m3fn, fixed scale 1.0 (vLLM default)", Quantization(fmt="e4m3fn", scale=1.0), "e4m3fn"),
    ("e5m2, per-tensor calibrated scale", Quantization(fmt="e5m2"), "e5m2"),
)


@dataclass(frozen=True, kw_only=True)
class MLATableConfig:
    batch: int = 1
    heads: int = 16
    q_len: int = 1
    kv_len: int = 1024
    rank: int = 512
    nope_dim: int = 128
    rope_dim: int = 64
    v_dim: int = 128
    policy: str = "fa2:bf16"
    seed: int = 0

    def __post_init__(self) -> None:
        for f in ("batch", "heads", "q_len", "kv_len", "nope_dim", "rope_dim", "v_dim"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad_value(f, v, "a positive integer")
        check_rank(self.rank, self.heads, self.nope_dim)


def mla_inputs(cfg: MLATableConfig):
    g = torch.Generator().manual_seed(cfg.seed)
    B, H, N, S, r = cfg.batch, cfg.heads, cfg.q_len, cfg.kv_len, cfg.rank

    def t(*shape, std=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    return (t(B, H, N, cfg.nope_dim), t(B, H, N, cfg.rope_dim), t(B, S, r), t(B, S, cfg.rope_dim),
            t(H, r, cfg.nope_dim, std=r**-0.5), t(H, r, cfg.v_dim, std=r**-0.5))


def run_mla_table(cfg: MLATableConfig) -> list[dict]:
    """One row per (cache, path): rmse, max_abs, cosine vs golden, overflow, cache bytes per token, FLOPs
    and bytes of the call (attnum.attention.cost.model), and for the absorbed row its RMSE against the explicit one."""
    args = mla_inputs(cfg)
    gold = mla_golden(*args, is_causal=True)
    rows = []
    for label, cache, kv_format in CACHES:
        if cache == "fp8_ds_mla" and cfg.rank % 128:
            continue
        explicit = None
        for absorbed in (False, True):
            out, over = mla_attention(*args, absorbed=absorbed, cache=cache, policy=cfg.policy, is_causal=True,
                                      return_overflow=True)
            dev = deviation(out, gold)
            vs_explicit = deviation(out, explicit)["rmse"] if absorbed else None
            explicit = out
            cost = attention_cost(CostConfig(batch=cfg.batch, heads=cfg.heads, q_len=cfg.q_len, kv_len=cfg.kv_len,
                                             head_dim=cfg.nope_dim, mla_rank=cfg.rank, rope_dim=cfg.rope_dim,
                                             kv_format=kv_format, absorbed=absorbed))
            rows.append({"cache": label, "path": "absorbed" if absorbed else "explicit", "rmse": dev["rmse"],
                         "max_abs": dev["max_abs"], "cosine": dev["cosine"], "overflow": over,
                         "cache_bytes_per_token": (cost.bytes["kv"] + cost.bytes["kv_scales"]) / (cfg.batch * cfg.kv_len),
                         "flops": cost.flops, "bytes": cost.total_bytes, "vs_explicit_rmse": vs_explicit})
    return rows
