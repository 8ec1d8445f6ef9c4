"""A cost model beside the accuracy: FLOPs, bytes moved, arithmetic intensity and a roofline bound.

Shape alphabet: B batch, H query heads, G KV heads (H / G is the GQA ratio), N queries, S cached
keys, d head dim (= dv), r MLA latent rank, dr MLA RoPE dim.

What is counted (one attention call of one layer, everything exact integers):

- FLOPs: the GEMMs only, 2 per multiply-add: Q K^T and P V over the (query, key) pairs the mask
  keeps (causal: bottom-right aligned, so decode's N queries are the last N tokens), plus MLA's
  projections (absorbed: q_nope W_UK^T and o_latent W_UV; explicit: c_KV W_UK and c_KV W_UV).
  Softmax's exp/max/sum are not counted (they run on other units and are a few % of the GEMMs).
- bytes: Q read, the KV cache read once at its format (values, plus 4 bytes per fp32 scale at the
  scale granularity of :mod:`attnum.attention.lowbit.quant`), the block table (4 bytes per page per
  sequence) when paged, the output written; MLA also reads W_UK and W_UV (compute format) and
  writes then reads its materialized intermediates (absorbed: q' and the latent output; explicit:
  the up-projected K and V). Only valid tokens are read (kernels mask the last page's tail).
- time bound: max(FLOPs / peak dense FLOP/s at the GEMM input format, bytes / HBM bandwidth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnum.attention.lowbit.quant import GRANULARITIES
from attnum.attention.serving.mla import check_rank
from attnum.errors import bad_value

MODES = ("prefill", "decode")
# Bytes per stored element; fp8_ds_mla is FlashMLA's layout (e4m3 latent, fp32 scale per 128, bf16 RoPE).
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "e4m3fn": 1, "e5m2": 1, "int8": 1, "fp8_ds_mla": 1}
COMPUTE = {"fp32": "fp32", "bf16": "bf16", "fp16": "bf16", "e4m3fn": "fp8", "e5m2": "fp8"}  # format -> peak class
_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8": "e4m3fn", "fp8_e4m3": "e4m3fn",
            "e4m3": "e4m3fn", "fp8_e5m2": "e5m2", "float32": "fp32"}


@dataclass(frozen=True)
class Device:
    """Peak dense tensor FLOP/s per GEMM input class ("bf16", "fp8", "fp32") and memory bandwidth."""

    name: str
    peak_flops: dict
    bandwidth: float  # bytes/s
    source: str
    sms: int = 0  # streaming multiprocessors (0: unknown; the split-KV occupancy model then assumes full)

    def peak(self, compute: str) -> float | None:
        return self.peak_flops.get(COMPUTE[compute])


# Dense (no 2:4 sparsity) peaks from NVIDIA's datasheets, which list the sparse figure with an
# asterisk; the dense figure is half of it. Cross-checked against secondary copies of the datasheets
# (glennklockwood.com/garden/processors/A100; the H100/H200 SXM spec tables), see docs/fp8-mla.md.
DEVICES: dict[str, Device] = {
    # A100 SXM4 80GB datasheet: BF16 312 TFLOPS (624 sparse), HBM2e 2,039 GB/s; no FP8 tensor cores.
    "A100": Device("A100 SXM 80GB", {"bf16": 312e12, "fp32": 156e12}, 2.039e12,
                   "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4)", sms=108),
    # H100 SXM5 datasheet: BF16 1,979 and FP8 3,958 TFLOPS with sparsity; HBM3 3.35 TB/s.
    "H100": Device("H100 SXM", {"bf16": 989.5e12, "fp8": 1979e12, "fp32": 494.5e12}, 3.35e12,
                   "NVIDIA H100 Tensor Core GPU datasheet (SXM5)", sms=132),
    # H200 SXM: the same Hopper compute as H100 SXM; HBM3e 4.8 TB/s (141 GB).
    "H200": Device("H200 SXM", {"bf16": 989.5e12, "fp8": 1979e12, "fp32": 494.5e12}, 4.8e12,
                   "NVIDIA H200 Tensor Core GPU datasheet (SXM)", sms=132),
}


@dataclass(frozen=True, kw_only=True)
class CostConfig:
    """One attention call to cost. Fields map 1:1 onto the decode/prefill flags."""

    mode: str = "decode"
    batch: int = 1
    heads: int = 32
    kv_heads: int | None = None
    q_len: int | None = None  # None: 1 for decode, kv_len for prefill
    kv_len: int = 4096
    head_dim: int = 128
    causal: bool = True
    compute: str = "bf16"
    kv_format: str = "bf16"
    kv_granularity: str = "tensor"
    kv_block: int = 128
    page_size: int | None = None
    mla_rank: int | None = None
    rope_dim: int = 64
    absorbed: bool = True
    name: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise bad_value("mode", self.mode, f"one of {MODES}")
        for f in ("batch", "heads", "kv_len", "head_dim", "kv_block"):
            _positive(f, getattr(self, f))
        for f in ("kv_heads", "q_len", "page_size", "mla_rank"):
            if getattr(self, f) is not None:
                _positive(f, getattr(self, f))
        if self.heads % self.G:
            raise bad_value("kv_heads", self.kv_heads, f"a divisor of heads={self.heads}")
        object.__setattr__(self, "compute", _fmt("compute", self.compute, COMPUTE))
        object.__setattr__(self, "kv_format", _fmt("kv_format", self.kv_format, ELEMENT_BYTES))
        if self.kv_granularity not in GRANULARITIES:
            raise bad_value("kv_granularity", self.kv_granularity, f"one of {GRANULARITIES}")
        if self.mla_rank is not None:
            check_rank(self.mla_rank, self.heads, self.head_dim)
            _positive("rope_dim", self.rope_dim)
        elif self.kv_format == "fp8_ds_mla":
            raise bad_value("kv_format", self.kv_format, "an MLA format only with mla_rank set")
        if not self.name:
            object.__setattr__(self, "name", _describe(self))

    @property
    def G(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def N(self) -> int:
        return self.q_len if self.q_len is not None else (1 if self.mode == "decode" else self.kv_len)


@dataclass(frozen=True)
class Cost:
    flops: int
    bytes: dict  # component -> bytes
    config: CostConfig

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.total_bytes

    def time(self, device: Device) -> float | None:
        """Roofline bound in seconds; None where the device has no GEMM at the compute format."""
        peak = device.peak(self.config.compute)
        return None if peak is None else max(self.flops / peak, self.total_bytes / device.bandwidth)

    def bound(self, device: Device) -> str | None:
        peak = device.peak(self.config.compute)
        return None if peak is None else ("compute" if self.flops / peak > self.total_bytes / device.bandwidth else "memory")


def pairs(N: int, S: int, causal: bool) -> int:
    """(query, key) pairs attended: N*S, or causal bottom-right: query i sees keys j <= i + S - N."""
    if not causal:
        return N * S
    return sum(min(S, max(0, i + S - N + 1)) for i in range(N))


def attention_cost(cfg: CostConfig) -> Cost:
    """FLOPs and bytes of one call (see the module docstring for what is counted)."""
    B, H, G, N, S, d = cfg.batch, cfg.heads, cfg.G, cfg.N, cfg.kv_len, cfg.head_dim
    p = pairs(N, S, cfg.causal)
    c = ELEMENT_BYTES[cfg.compute]
    by = {"out": B * H * N * d * 2}  # bf16 output
    if cfg.page_size is not None:
        by["page_table"] = B * math.ceil(S / cfg.page_size) * 4
    if cfg.mla_rank is None:
        flops = 2 * B * H * p * (d + d)
        by["q"] = B * H * N * d * c
        by["kv"] = 2 * B * G * S * d * ELEMENT_BYTES[cfg.kv_format]
        by["kv_scales"] = 2 * 4 * _scale_count(cfg, G) if cfg.kv_format in ("e4m3fn", "e5m2", "int8") else 0
        return Cost(flops, by, cfg)
    r, dr = cfg.mla_rank, cfg.rope_dim
    by["q"] = B * H * N * (d + dr) * c
    by["weights"] = H * r * (d + d) * c  # W_UK (r x dn) and W_UV (r x dv) per head
    by["kv"], by["kv_scales"] = _mla_cache_bytes(cfg, B, S, r, dr)
    if cfg.absorbed:
        flops = 2 * B * H * (p * ((r + dr) + r) + N * d * r + N * r * d)
        by["intermediates"] = 2 * B * H * N * ((r + dr) + r) * c  # q' and the latent output, written and read
    else:
        flops = 2 * B * H * (S * r * (d + d) + p * ((d + dr) + d))
        by["intermediates"] = 2 * B * H * S * ((d + dr) + d) * c  # K and V up-projected, written and read
    return Cost(flops, by, cfg)


def split_decode_time(cfg: CostConfig, device: Device, splits: list[int]) -> float | None:
    """Roofline bound of a split-KV decode whose sequence b has ``splits[b]`` partials (B = len(splits)).

    A model, stated: the call's FLOPs and bytes (:func:`attention_cost`) plus the partials the split
    adds (each (sequence, head, split) writes an fp32 O of d values and an fp32 LSE, which the combine
    reads back); a decode streams the cache with one CTA per (sequence, kv head, split), and an SM
    moves at most 1 / SMs of the HBM bandwidth, so the bandwidth achieved is
    bandwidth * min(1, CTAs / SMs). This is why kernels split at small batch, and what a fixed split
    size (more or fewer CTAs than the heuristic) costs."""
    if len(splits) != cfg.batch:
        raise bad_value("splits", len(splits), f"one split count per sequence (batch={cfg.batch})")
    cost = attention_cost(cfg)
    peak = device.peak(cfg.compute)
    if peak is None:
        return None
    partials = sum(s for s in splits if s > 1)
    extra = 2 * partials * cfg.heads * cfg.N * (cfg.head_dim + 1) * 4
    ctas = sum(splits) * cfg.G * max(1, math.ceil(cfg.N * (cfg.heads // cfg.G) / 64))
    frac = 1.0 if not device.sms else min(1.0, ctas / device.sms)
    return max(cost.flops / peak, (cost.total_bytes + extra) / (device.bandwidth * frac))


def _scale_count(cfg: CostConfig, G: int) -> int:
    """fp32 scales per tensor (K or V) at the cache's granularity, as attnum.attention.lowbit.quant stores them."""
    B, S = cfg.batch, cfg.kv_len
    return {"tensor": 1, "head": B * G, "block": B * G * math.ceil(S / cfg.kv_block), "token": B * G * S}[cfg.kv_granularity]


def _mla_cache_bytes(cfg: CostConfig, B: int, S: int, r: int, dr: int) -> tuple[int, int]:
    """(latent + RoPE bytes, scale bytes). An 8-bit latent keeps its RoPE part in bf16 (FlashMLA's
    fp8_ds_mla, attnum's mla_attention): fp8_ds_mla = r e4m3 + r/128 fp32 scales + dr bf16 per token
    (656 bytes for r = 512, dr = 64); e4m3fn/e5m2/int8 take scales at ``kv_granularity``."""
    e = ELEMENT_BYTES[cfg.kv_format]
    if e > 1:
        return B * S * (r + dr) * e, 0
    if cfg.kv_format == "fp8_ds_mla":
        return B * S * (r + 2 * dr), B * S * 4 * math.ceil(r / 128)
    return B * S * (r + 2 * dr), 4 * _scale_count(cfg, 1)


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_value(name, value, "a positive integer")


def _fmt(param: str, value, table) -> str:
    key = str(value).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in table:
        raise bad_value(param, value, f"one of {sorted(table)}")
    return key


def _describe(cfg: CostConfig) -> str:
    parts = [cfg.mode, f"kv={cfg.kv_format}"]
    if cfg.G != cfg.heads:
        parts.append(f"gqa={cfg.heads // cfg.G}")
    if cfg.page_size:
        parts.append(f"page={cfg.page_size}")
    if cfg.mla_rank:
        parts.append(f"mla r={cfg.mla_rank} {'absorbed' if cfg.absorbed else 'explicit'}")
    return " ".join(parts)
