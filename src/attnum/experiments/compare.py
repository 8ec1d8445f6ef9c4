"""One comparison point: flash and baseline under a policy against the float64 golden value.

All three see the same inputs: float64 samples rounded once to the policy's input format, so the
deviations measure the arithmetic, not the input quantization.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from attnum.attention import baseline_attention, flash_attention, golden_attention
from attnum.attention.flash import VARIANTS, kv_tile_order
from attnum.attention.tiles import resolve_tiles
from attnum.errors import AttnumInputError
from attnum.inputs import InputSpec, make_qkv
from attnum.metrics import deviation, error_ratio
from attnum.policy import parse_policy
from attnum.rounding import round_to

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """Every knob of one point; field names are the ``attnum compare`` flags."""

    policy: str = "uniform"
    format: str = "bf16"
    seq_len: int = 1024
    kv_len: int | None = None
    head_dim: int = 64
    heads: int = 8
    kv_heads: int | None = None
    batch: int = 1
    block_q: int | None = None
    block_k: int | None = None
    sram: int | None = None
    swap_blocks: bool = False
    square: bool = False
    variant: str = "fa2"
    kv_order: str = "forward"
    causal: bool = False
    dist: str = "normal"
    logit_scale: float = 1.0
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        parse_policy(self.policy, self.format)
        self.input_spec()
        tiles = self.tiles()
        if self.variant not in VARIANTS:
            raise AttnumInputError(f"variant={self.variant!r} is not allowed; expected one of {VARIANTS}")
        kv_tile_order(tiles.Tc(self.input_spec().S), self.kv_order)
        if self.device not in DEVICES:
            raise AttnumInputError(f"device={self.device!r} is not allowed; expected one of {DEVICES}")

    def input_spec(self) -> InputSpec:
        return InputSpec(batch=self.batch, heads=self.heads, kv_heads=self.kv_heads, seq_len=self.seq_len,
                         kv_len=self.kv_len, head_dim=self.head_dim, dist=self.dist,
                         logit_scale=self.logit_scale, seed=self.seed)

    def tiles(self):
        return resolve_tiles(self.head_dim, block_q=self.block_q, block_k=self.block_k, sram=self.sram,
                             swap_blocks=self.swap_blocks, square=self.square)

    def to_dict(self) -> dict:
        return asdict(self)


def compare_inputs(cfg: CompareConfig):
    """The shared inputs of a point: float64 samples rounded to the policy's input format."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise AttnumInputError("device='cuda' is not allowed here; CUDA is not available on this machine")
    policy = parse_policy(cfg.policy, cfg.format)
    q, k, v = make_qkv(cfg.input_spec(), device=cfg.device)
    return policy, tuple(round_to(x, policy.inputs) for x in (q, k, v))


def run_compare(cfg: CompareConfig) -> dict:
    """Run one point -> {"config", "policy", "tiles", "metrics": {pair: {...}}, "ratio", "timing_s"}."""
    policy, (q, k, v) = compare_inputs(cfg)
    tiles = cfg.tiles()
    common = dict(is_causal=cfg.causal)
    timing = {}
    t0 = time.perf_counter()
    golden = golden_attention(q, k, v, **common)
    timing["golden"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    base = baseline_attention(q, k, v, policy=policy, **common)
    timing["baseline"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    flash = flash_attention(q, k, v, policy=policy, block_q=tiles.Br, block_k=tiles.Bc, variant=cfg.variant,
                            kv_order=cfg.kv_order, **common)
    timing["flash"] = time.perf_counter() - t0
    out_fmt = policy.out
    metrics = {
        "flash_vs_golden": deviation(flash, golden, fmt=out_fmt),
        "baseline_vs_golden": deviation(base, golden, fmt=out_fmt),
        "flash_vs_baseline": deviation(flash, base, fmt=out_fmt),
    }
    ratio = {key: error_ratio(metrics["flash_vs_golden"], metrics["baseline_vs_golden"], key)
             for key in ("max_abs", "mean_abs", "rmse")}
    return {
        "config": cfg.to_dict(),
        "policy": {"name": policy.name, **policy.describe()},
        "tiles": {"Br": tiles.Br, "Bc": tiles.Bc, "Tc": tiles.Tc(cfg.input_spec().S), "area": tiles.area},
        "metrics": metrics,
        "ratio": ratio,
        "timing_s": timing,
    }
