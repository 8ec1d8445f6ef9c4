"""One decode point: KV-cache decode (split-KV, paged, GQA, quantized KV, MLA) against float64 golden.

:class:`DecodeConfig` is the one description of a point: its fields are the ``attnum decode`` flags and
the sweep axes of ``decode`` points, and :data:`DECODE_FIELDS` holds each field's validator.

Inputs: seeded N(0, 1) q (B, H, N, d), k, v (B, G, S, d), rounded once to the policy's input format, so
the deviation measures the decode's arithmetic (and the KV cache's quantization when ``kv_cache_dtype``
quantizes: the golden sees the unquantized cache). Every sequence holds ``cache_len`` keys; the N
queries are its last N positions (causal, ``causal_alignment``). Each point records:

- ``decode_vs_golden``: the configured kernel (``splits``, ``page_size`` tiled by page, KV format);
- ``unsplit_vs_golden``: the same with one split on a contiguous cache (the kernel without flash-decoding);
- ``decode_vs_unsplit``: what splitting / paging alone changed;
- ``baseline_vs_golden``: plain same-precision attention per sequence (materialized, ``policy``);
- with ``mla_rank``: DeepSeek MLA (:mod:`attnum.attention.serving.mla`) on the latent cache, the chosen path
  (``absorbed`` or explicit) as ``decode_vs_golden``, the other as ``other_path_vs_golden``, and
  ``absorbed_vs_explicit``;
- ``cost``: FLOPs, bytes and roofline bounds (:mod:`attnum.attention.cost.model`) where the format has a cost model.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from attnum.attention.baseline import baseline_attention
from attnum.attention.masks import ALIGNMENTS
from attnum.attention.serving.decode import decode_attention, decode_reference
from attnum.attention.serving.merge import parse_lse_base
from attnum.attention.serving.paged import paged_decode_attention, to_pages
from attnum.errors import AttnumInputError, bad_value
from attnum.numerics.formats import get_format
from attnum.numerics.metrics import deviation
from attnum.numerics.policy import parse_policy
from attnum.numerics.rounding import round_to
from attnum.sweep.axes import COMMON as COMPARE_FIELDS
from attnum.sweep.axes import accepts, opt_positive_int, positive_int
from attnum.workloads.inputs import InputSpec, make_qkv


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """Every knob of one decode point; field names are the ``attnum decode`` flags (``--cache-len`` ...).

    ``kv_heads`` None = ``heads`` (MHA); ``page_size`` None = a contiguous cache; ``kv_cache_dtype``
    vLLM's names (``auto`` keeps the policy's input format; ``fp8``/``fp8_e4m3``, ``fp8_e5m2``,
    ``int8`` quantize with ``kv_scale``: a number, vLLM's default 1.0, or ``calibrated``); ``mla_rank``
    switches to MLA with that latent rank (``absorbed``: the absorbed path).
    """

    policy: str = "fa2"
    format: str = "bf16"
    splits: int = 1
    page_size: int | None = None
    kv_heads: int | None = None
    lse_base: str = "e"
    cache_len: int = 4096
    queries: int = 1
    batch: int = 1
    heads: int = 8
    head_dim: int = 128
    causal_alignment: str = "bottom_right"
    seed: int = 0
    kv_cache_dtype: str = "auto"
    kv_scale: float | str = 1.0
    mla_rank: int | None = None
    absorbed: bool = False
    split_rule: str | None = None

    def __post_init__(self) -> None:
        for f in fields(DecodeConfig):
            check_decode_field(f.name, getattr(self, f.name))
        object.__setattr__(self, "format", get_format(self.format).name)
        object.__setattr__(self, "lse_base", str(parse_lse_base(self.lse_base)))
        from attnum.attention.lowbit.quant import parse_scale

        object.__setattr__(self, "kv_scale", parse_scale(self.kv_scale))
        parse_policy(self.policy, self.format)
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise bad_value("kv_heads", self.kv_heads, f"a divisor of heads={self.heads}")
        if self.split_rule is not None and self.splits != 1:
            raise bad_value("splits", self.splits, "1 when split_rule is set (the rule decides the splits)")
        if self.mla_rank is None:
            if self.absorbed:
                raise bad_value("absorbed", True, "False unless mla_rank is set (absorption is an MLA path)")
            return
        from attnum.attention.serving.mla import check_rank

        check_rank(self.mla_rank, self.heads, self.head_dim)
        for name, unset in (("splits", 1), ("page_size", None), ("kv_heads", None), ("split_rule", None)):
            if getattr(self, name) != unset:
                raise bad_value(name, getattr(self, name), f"{unset} with mla_rank (MLA decode is one MQA over the "
                                "latent, unsplit, contiguous)")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(DecodeConfig)}


def _kv_dtype(v: Any) -> bool:
    from attnum.attention.lowbit.quant import KV_CACHE_DTYPES

    return isinstance(v, str) and v.strip().lower() in KV_CACHE_DTYPES


def _scale(v: Any) -> bool:
    from attnum.attention.lowbit.quant import parse_scale

    return not isinstance(v, bool) and accepts(parse_scale)(v)


DECODE_FIELDS: dict[str, tuple[str, Any]] = {
    "policy": COMPARE_FIELDS["policy"],
    "format": COMPARE_FIELDS["format"],
    "splits": ("a positive integer (num_splits: split-KV chunks merged, flash-decoding)", positive_int),
    "page_size": ("a positive integer (tokens per page; the kernel tiles by page) or none (contiguous)", opt_positive_int),
    "kv_heads": ("a positive integer dividing heads (G; default heads)", opt_positive_int),
    "lse_base": ("'e' (natural: flash-attn, vLLM) or 2 (FlashInfer)", accepts(parse_lse_base)),
    "cache_len": ("a positive integer (S, keys in each sequence's cache)", positive_int),
    "queries": ("a positive integer (N, new queries per sequence; 1 = plain decode)", positive_int),
    "batch": COMPARE_FIELDS["batch"],
    "heads": COMPARE_FIELDS["heads"],
    "head_dim": COMPARE_FIELDS["head_dim"],
    "causal_alignment": (f"one of {ALIGNMENTS}", lambda v: v in ALIGNMENTS),
    "seed": COMPARE_FIELDS["seed"],
    "kv_cache_dtype": ("one of auto, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2, int8 (vLLM's names)", _kv_dtype),
    "kv_scale": ("a positive finite number (vLLM's default 1.0) or 'calibrated'", _scale),
    "mla_rank": ("a positive integer (MLA latent rank r) or none", opt_positive_int),
    "absorbed": ("true or false", lambda v: isinstance(v, bool)),
    "split_rule": ("none or a split rule (attnum.attention.serving.split_rules: fa2, flashinfer:2048, sglang-fixed:256, "
                   "sglang, vllm, vllm-invariant, count:N)", lambda v: v is None or accepts(_split_rule)(v)),
}


def _split_rule(v: Any):
    from attnum.attention.serving.split_rules import parse_split_rule

    return parse_split_rule(v)


def check_decode_field(name: str, value: Any) -> None:
    allowed, ok = DECODE_FIELDS[name]
    if not ok(value):
        raise bad_value(name, value, allowed)


def _quantization(cfg: DecodeConfig):
    from attnum.attention.lowbit.quant import kv_cache_quantization

    return kv_cache_quantization(cfg.kv_cache_dtype, cfg.kv_scale)


def run_decode(cfg: DecodeConfig) -> dict[str, Any]:
    """Run one decode point -> {"config", "policy", "metrics", "kv", "tiles", "cost", "timing_s"}."""
    from attnum.sweep.memory_budget import require_decode

    require_decode(cfg)
    t0 = time.perf_counter()
    policy = parse_policy(cfg.policy, cfg.format)
    out = _run_mla(cfg, policy) if cfg.mla_rank is not None else _run_attention(cfg, policy)
    out["config"] = cfg.to_dict()
    out["policy"] = {"name": policy.name, **policy.describe()}
    out["cost"] = _cost(cfg)
    out["timing_s"] = time.perf_counter() - t0
    return out


def _run_attention(cfg: DecodeConfig, policy) -> dict[str, Any]:
    spec = InputSpec(batch=cfg.batch, heads=cfg.heads, kv_heads=cfg.kv_heads, seq_len=cfg.queries,
                     kv_len=cfg.cache_len, head_dim=cfg.head_dim, seed=cfg.seed)
    q, k, v = (round_to(x, policy.inputs) for x in make_qkv(spec))
    lens = torch.full((cfg.batch,), cfg.cache_len)
    common = dict(cache_seqlens=lens, causal_alignment=cfg.causal_alignment)
    gold = decode_reference(q, k, v, **common)
    quant = _quantization(cfg)
    overflow = 0
    kq, vq = k, v
    if quant is not None:
        from attnum.attention.lowbit.quant import quantize_kv_cache

        cache = quantize_kv_cache(k, v, quant)
        (kq, vq), overflow = cache.dequantize(policy.inputs), cache.overflow
    kw = dict(policy=policy, lse_base=cfg.lse_base, split_rule=cfg.split_rule, **common)
    if cfg.page_size is None:
        o = decode_attention(q, kq, vq, num_splits=cfg.splits, **kw)
        tiles = {"Bc": 128, "splits": cfg.splits, "paged": False}
    else:
        kp, table = to_pages(kq, cfg.page_size, cache_seqlens=lens, seed=cfg.seed)
        vp, _ = to_pages(vq, cfg.page_size, cache_seqlens=lens, seed=cfg.seed)
        o = paged_decode_attention(q, kp, vp, block_table=table, num_splits=cfg.splits, **kw)
        tiles = {"Bc": cfg.page_size, "splits": cfg.splits, "paged": True}
    if cfg.split_rule is not None:
        from attnum.attention.serving.split_rules import plan_splits

        plan = plan_splits(cfg.split_rule, lens=lens.tolist(), heads=cfg.heads, kv_heads=cfg.kv_heads or cfg.heads,
                           head_dim=cfg.head_dim, queries=cfg.queries)
        tiles.update(splits=len(plan.bounds[0]), split_rule=cfg.split_rule, plan=plan.note,
                     Bc=cfg.page_size or plan.block_k)
    unsplit = decode_attention(q, kq, vq, num_splits=1, **{**kw, "split_rule": None})
    base = torch.cat([baseline_attention(q[b:b + 1], kq[b:b + 1], vq[b:b + 1], is_causal=True,
                                         causal_alignment=cfg.causal_alignment, policy=policy)
                      for b in range(cfg.batch)])
    fmt = policy.out
    metrics = {"decode_vs_golden": deviation(o, gold, fmt=fmt), "unsplit_vs_golden": deviation(unsplit, gold, fmt=fmt),
               "decode_vs_unsplit": deviation(o, unsplit, fmt=fmt), "baseline_vs_golden": deviation(base, gold, fmt=fmt)}
    return {"metrics": metrics, "tiles": tiles,
            "kv": {"dtype": cfg.kv_cache_dtype, "quantized": quant is not None, "overflow": overflow}}


def _mla_cache(cfg: DecodeConfig):
    key = cfg.kv_cache_dtype.strip().lower()
    if key in ("auto", "bf16"):
        return "bf16"
    if key == "fp16":
        return "fp16"
    return _quantization(cfg)


def _run_mla(cfg: DecodeConfig, policy) -> dict[str, Any]:
    from attnum.attention.serving.mla import mla_attention, mla_golden
    from attnum.studies.serving.mla_table import MLATableConfig, mla_inputs

    args = mla_inputs(MLATableConfig(batch=cfg.batch, heads=cfg.heads, q_len=cfg.queries, kv_len=cfg.cache_len,
                                     rank=cfg.mla_rank, nope_dim=cfg.head_dim, v_dim=cfg.head_dim, seed=cfg.seed))
    gold = mla_golden(*args, is_causal=True, causal_alignment=cfg.causal_alignment)
    cache = _mla_cache(cfg)
    paths, overflow = {}, 0
    for absorbed in (False, True):
        paths[absorbed], over = mla_attention(*args, absorbed=absorbed, cache=cache, policy=policy, is_causal=True,
                                              causal_alignment=cfg.causal_alignment, return_overflow=True)
        overflow = max(overflow, over)
    fmt = policy.out
    metrics = {"decode_vs_golden": deviation(paths[cfg.absorbed], gold, fmt=fmt),
               "other_path_vs_golden": deviation(paths[not cfg.absorbed], gold, fmt=fmt),
               "absorbed_vs_explicit": deviation(paths[True], paths[False], fmt=fmt)}
    return {"metrics": metrics, "tiles": {"Bc": 64, "splits": 1, "paged": False},
            "kv": {"dtype": cfg.kv_cache_dtype, "quantized": not isinstance(cache, str), "overflow": overflow}}


def _cost(cfg: DecodeConfig) -> dict[str, Any] | None:
    """attnum.attention.cost.model for this call, or None where the formats have no cost model."""
    from attnum.attention.cost.model import DEVICES, CostConfig, attention_cost

    kv = {"auto": cfg.format, "fp8": "e4m3fn", "fp8_e4m3": "e4m3fn", "fp8_e5m2": "e5m2"}.get(
        cfg.kv_cache_dtype, cfg.kv_cache_dtype)
    try:
        c = attention_cost(CostConfig(batch=cfg.batch, heads=cfg.heads, kv_heads=cfg.kv_heads, q_len=cfg.queries,
                                      kv_len=cfg.cache_len, head_dim=cfg.head_dim, compute=cfg.format, kv_format=kv,
                                      page_size=cfg.page_size, mla_rank=cfg.mla_rank, absorbed=cfg.absorbed))
    except AttnumInputError:
        return None
    times = {name: c.time(dev) for name, dev in DEVICES.items()}
    return {"flops": c.flops, "bytes": c.total_bytes, "intensity": c.intensity, "bound_time_s": times,
            "config": {k: v for k, v in asdict(c.config).items() if k != "name"}}


