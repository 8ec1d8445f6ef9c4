"""``attnum ring``: ring attention's deviation from the fp64 golden against shards, layout and merge
policy, simulated (the reference) or for real over torch.distributed, beside single-device flash.

Inputs: float64 N(0, 1) samples rounded once to the attention policy's input format, as
``attnum compare`` does; golden, flash and every ring see the same tensors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from attnum.attention import flash_attention, golden_attention
from attnum.attention.parallel.ring import LAYOUTS, ring_attention, shard_positions
from attnum.attention.serving.merge import METHODS
from attnum.errors import AttnumInputError, bad_value
from attnum.kernels.context_parallel import CP_KERNELS, cp_status
from attnum.numerics.metrics import deviation
from attnum.numerics.policy import parse_policy
from attnum.numerics.rounding import round_to

BACKENDS = ("sim", "gloo", "nccl", *CP_KERNELS)


def _tuple(v, cast, param):
    items = v.split(",") if isinstance(v, str) else (v if isinstance(v, (tuple, list)) else [v])
    try:
        out = tuple(cast(x.strip() if isinstance(x, str) else x) for x in items)
    except (TypeError, ValueError):
        raise bad_value(param, v, "a value or a comma-separated list") from None
    if not out:
        raise bad_value(param, v, "at least one value")
    return out


@dataclass(frozen=True, kw_only=True)
class RingConfig:
    """``attnum ring``'s flags, one field each (shards, layout and merge_policy may be lists)."""

    shards: tuple[int, ...] = (2, 4, 8)
    layout: tuple[str, ...] = ("contiguous", "zigzag")
    merge_policy: tuple[str, ...] = ("fp32",)
    policy: str = "fa2:bf16"
    merge_method: str = "lse"
    seq_len: int = 4096
    heads: int = 4
    kv_heads: int | None = None
    head_dim: int = 64
    batch: int = 1
    causal: bool = True
    block_k: int | None = None
    seed: int = 0
    backend: str = "sim"
    timeout: float = 300.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "shards", _tuple(self.shards, int, "shards"))
        object.__setattr__(self, "layout", _tuple(self.layout, str, "layout"))
        mp = (self.merge_policy,) if isinstance(self.merge_policy, str) else tuple(self.merge_policy)
        object.__setattr__(self, "merge_policy", mp)
        for name in ("seq_len", "heads", "head_dim", "batch"):  # before the layouts, which divide by them
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad_value(name, getattr(self, name), "a positive integer")
        for name in ("kv_heads", "block_k"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise bad_value(name, v, "a positive integer (default: unset)")
        if not isinstance(self.timeout, (int, float)) or not 0 < self.timeout < float("inf"):
            raise bad_value("timeout", self.timeout, "a positive finite number of seconds")
        for lay in self.layout:
            if lay not in LAYOUTS:
                raise bad_value("layout", lay, f"one of {LAYOUTS}")
            for P in self.shards:
                shard_positions(self.seq_len, P, lay)  # one line when P does not divide N as needed
        parse_policy(self.policy)
        for m in self.merge_policy:
            parse_policy(m)
        if self.merge_method not in METHODS:
            raise bad_value("merge_method", self.merge_method, f"one of {METHODS}")
        g = self.kv_heads or self.heads
        if self.heads % g:
            raise bad_value("kv_heads", self.kv_heads, f"a divisor of heads={self.heads}")
        if self.backend not in BACKENDS:
            raise bad_value("backend", self.backend, f"one of {BACKENDS}")
        if self.backend in CP_KERNELS:
            ok, why = cp_status(self.backend)
            if not ok:
                raise AttnumInputError(f"backend={self.backend!r} is not available here: {why}")
            raise AttnumInputError(f"backend={self.backend!r}: running it is not wired up in this version; "
                                   "its adapter is " + CP_KERNELS[self.backend].rank_attention.__module__)
        if self.backend == "nccl" and torch.cuda.device_count() < max(self.shards):
            raise AttnumInputError(f"backend='nccl' is not available here: it needs {max(self.shards)} CUDA devices, "
                                   f"found {torch.cuda.device_count()}")

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed)
        G = self.kv_heads or self.heads
        fmt = parse_policy(self.policy).inputs
        shapes = [(self.batch, self.heads, self.seq_len, self.head_dim),
                  (self.batch, G, self.seq_len, self.head_dim), (self.batch, G, self.seq_len, self.head_dim)]
        return tuple(round_to(torch.randn(s, generator=g, dtype=torch.float64), fmt) for s in shapes)


def run_ring(cfg: RingConfig) -> dict:
    """One row per (shards, layout, merge policy): deviation from golden, beside single-device flash."""
    q, k, v = cfg.inputs()
    common = dict(is_causal=cfg.causal)
    gold = golden_attention(q, k, v, **common)
    t0 = time.perf_counter()
    flash = flash_attention(q, k, v, policy=cfg.policy, block_k=cfg.block_k, **common)
    flash_s = time.perf_counter() - t0
    single = deviation(flash.double(), gold)
    rows = []
    for P in cfg.shards:
        for layout in cfg.layout:
            for mp in cfg.merge_policy:
                kw = dict(policy=cfg.policy, shards=P, layout=layout, merge_policy=mp, merge_method=cfg.merge_method,
                          block_k=cfg.block_k, **common)
                t0 = time.perf_counter()
                sim = ring_attention(q, k, v, **kw)
                row = {"shards": P, "layout": layout, "merge_policy": mp, "backend": cfg.backend,
                       "sim_seconds": time.perf_counter() - t0, "flash_seconds": flash_s}
                out = sim
                if cfg.backend in ("gloo", "nccl"):
                    from attnum.studies.parallel.ring_run import ring_attention_distributed

                    t0 = time.perf_counter()
                    out = ring_attention_distributed(q, k, v, backend=cfg.backend, timeout=cfg.timeout, **kw)
                    row["seconds"] = time.perf_counter() - t0
                    row["bit_equal_sim"] = bool(torch.equal(out, sim))
                m = deviation(out.double(), gold)
                row.update({"max_abs": m["max_abs"], "mean_abs": m["mean_abs"], "rmse": m["rmse"],
                            "single_max_abs": single["max_abs"], "single_mean_abs": single["mean_abs"],
                            "ratio_to_single": m["mean_abs"] / single["mean_abs"] if single["mean_abs"] else float("nan"),
                            "nan": int(torch.isnan(out).sum())})
                rows.append(row)
    return {"config": {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}, "rows": rows}
