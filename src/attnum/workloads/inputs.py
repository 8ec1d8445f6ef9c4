"""Seeded Q, K, V generators.

Distributions:
- ``normal``: N(0, 1) entries.
- ``uniform``: U(-sqrt(3), sqrt(3)) entries (unit variance, like ``normal``).
- ``outlier``: FlashAttention-3's numerics test mix, N(0, 1) + N(0, 100) * Bernoulli(0.001)
  (Shah et al. 2024, Sec. 4.3): rare large entries that stretch the logit range.
- ``ties``: controlled exact ties at every row's maximum (:func:`tied_rows`): the keys cycle through
  ``TIE_DISTINCT`` distinct N(0, 1) vectors, so each query's maximum is attained by every copy of one
  key (S / TIE_DISTINCT of them, in every tile of >= 2 * TIE_DISTINCT keys) in any format; Q, V normal.
- ``lowrank``: similar low-rank rows (:func:`low_rank_rows`) for Q, K and V: one shared direction plus
  a rank-``LOW_RANK`` spread of ``LOW_RANK_SPREAD``, the representations Qiu & Yao (arXiv 2510.04212)
  see emerge in training; their scores differ little, so a narrow format rounds many onto the max.

- ``kbias``, ``massive``, ``sink``, ``lm``: the structures that break low-bit attention (channel
  bias in K, massive activations, an attention sink) and Q, K, V captured from attnum's trained
  byte-level LM; see :mod:`attnum.workloads.structured`.

``logit_scale`` multiplies Q, so the logits scale * q.k grow by that factor: the knob that moves
the softmax from near-uniform (small) to near-one-hot (large).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from attnum.errors import AttnumInputError

DISTS = ("normal", "uniform", "outlier", "ties", "lowrank", "kbias", "massive", "sink", "lm")
# Joint Q/K/V structure (channel bias, massive activations, sink, captured LM): attnum.workloads.structured.
STRUCTURED = ("kbias", "massive", "sink", "lm")
TIE_DISTINCT = 4
LOW_RANK = 2
LOW_RANK_SPREAD = 0.25


@dataclass(frozen=True, kw_only=True)
class InputSpec:
    batch: int = 1
    heads: int = 8
    kv_heads: int | None = None
    seq_len: int = 1024
    kv_len: int | None = None
    head_dim: int = 64
    dist: str = "normal"
    logit_scale: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "seq_len", "head_dim"):
            _positive(name, getattr(self, name))
        for name in ("kv_heads", "kv_len"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if self.heads % self.G:
            raise AttnumInputError(f"kv_heads={self.kv_heads!r} is not allowed; expected a divisor of heads={self.heads}")
        if self.dist not in DISTS:
            raise AttnumInputError(f"dist={self.dist!r} is not allowed; expected one of {DISTS}")
        if not (isinstance(self.logit_scale, (int, float)) and math.isfinite(self.logit_scale) and self.logit_scale > 0):
            raise AttnumInputError(f"logit_scale={self.logit_scale!r} is not allowed; expected a positive finite number")

    @property
    def G(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def S(self) -> int:
        return self.seq_len if self.kv_len is None else self.kv_len

    def to_dict(self) -> dict:
        return asdict(self)


def _positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise AttnumInputError(f"{name}={value!r} is not allowed; expected a positive integer")


def sample(shape: tuple[int, ...], dist: str, generator: torch.Generator, device="cpu") -> torch.Tensor:
    """One float64 tensor of ``dist`` entries (see the module docstring)."""
    if dist == "normal":
        return torch.randn(shape, generator=generator, dtype=torch.float64).to(device)
    if dist == "uniform":
        return ((torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * math.sqrt(3)).to(device)
    if dist == "outlier":
        base = torch.randn(shape, generator=generator, dtype=torch.float64)
        big = torch.randn(shape, generator=generator, dtype=torch.float64) * 10.0  # N(0, 100): std 10
        hit = torch.rand(shape, generator=generator, dtype=torch.float64) < 1e-3
        return (base + big * hit).to(device)
    if dist == "ties":
        return tied_rows(shape, TIE_DISTINCT, generator).to(device)
    if dist == "lowrank":
        return low_rank_rows(shape, LOW_RANK, LOW_RANK_SPREAD, generator).to(device)
    raise AttnumInputError(f"dist={dist!r} is not allowed; expected one of {DISTS}")


def tied_rows(shape: tuple[int, ...], distinct: int, generator: torch.Generator) -> torch.Tensor:
    """float64 (..., S, d): row j is ``base[j % distinct]`` of ``distinct`` N(0, 1) rows per leading
    index, so any window of ``r * distinct`` consecutive rows holds each distinct row r times.

    As keys, every score q . k_j repeats exactly (the same dot product): each query's maximum is
    shared by all ceil(S / distinct) copies of its best key (one fewer at most where S is not a
    multiple), and a tile of Bc >= 2 * distinct keys holds >= 2 of them.
    """
    _positive("distinct", distinct)
    *lead, S, d = shape
    base = torch.randn((*lead, distinct, d), generator=generator, dtype=torch.float64)
    return base[..., torch.arange(S) % distinct, :]


def low_rank_rows(shape: tuple[int, ...], rank: int, spread: float, generator: torch.Generator) -> torch.Tensor:
    """float64 (..., S, d): mu + spread * z_j W / sqrt(rank), with mu (d,) and W (rank, d) N(0, 1)
    per leading index and z_j (rank,) N(0, 1) per row: rows that share one direction and differ in
    a rank-``rank`` subspace (cosine ~ 1 / (1 + spread**2) between two rows)."""
    _positive("rank", rank)
    if not (math.isfinite(spread) and spread >= 0):
        raise AttnumInputError(f"spread={spread!r} is not allowed; expected a non-negative finite number")
    *lead, S, d = shape
    mu = torch.randn((*lead, 1, d), generator=generator, dtype=torch.float64)
    w = torch.randn((*lead, rank, d), generator=generator, dtype=torch.float64)
    z = torch.randn((*lead, S, rank), generator=generator, dtype=torch.float64)
    return mu + spread * (z @ w) / math.sqrt(rank)


def make_qkv(spec: InputSpec, device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 q (B, H, N, d), k (B, G, S, d), v (B, G, S, d), identical for a given spec on any device."""
    if spec.dist in STRUCTURED:
        from attnum.workloads.structured import structured_qkv

        return structured_qkv(spec, device)
    g = torch.Generator().manual_seed(spec.seed)
    qv_dist = "normal" if spec.dist == "ties" else spec.dist  # ties: only the keys repeat
    q = sample((spec.batch, spec.heads, spec.seq_len, spec.head_dim), qv_dist, g, device) * spec.logit_scale
    k = sample((spec.batch, spec.G, spec.S, spec.head_dim), spec.dist, g, device)
    v = sample((spec.batch, spec.G, spec.S, spec.head_dim), qv_dist, g, device)
    return q, k, v
