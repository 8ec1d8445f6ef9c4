"""The consistency study's point: one request, the ways a server computes it, the batches around it.

Batch mixes: the other requests of a batch have lengths drawn log-uniformly from
[``co_len_min``, ``co_len_max``] (round(exp(U(ln min, ln max)))), seeded by (``seed``, B, mix): short
and long requests in the proportions of a chat workload's heavy tail. Fields map 1:1 onto
``attnum consistency``'s flags and are the sweep axes of ``kind = "consistency"`` points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch

from attnum.attention.serving.split_rules import parse_split_rule
from attnum.errors import bad_value
from attnum.numerics.policy import parse_policy

DEFAULT_RULES = ("fa2", "flashinfer:2048", "sglang-fixed:256", "sglang", "vllm", "vllm-invariant")


def _ints(name: str, v: Any) -> tuple[int, ...]:
    if isinstance(v, str):  # the CLI's own syntax, "1,4,16", in a spec too
        try:
            v = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise bad_value(name, v, "one or more positive integers") from None
    t = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    if not t or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in t):
        raise bad_value(name, v, "one or more positive integers")
    return t


@dataclass(frozen=True, kw_only=True)
class ConsistencyConfig:
    """One request of ``length`` tokens (H ``heads``, G ``kv_heads``, d ``head_dim``), its decode
    outputs at ``positions`` evenly spaced query positions from ``first_position`` to the last."""

    kind: str = "consistency"
    policy: str = "fa2:bf16"
    length: int = 1536
    first_position: int = 320
    positions: int = 10
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 64
    rules: tuple[str, ...] = DEFAULT_RULES
    batch_sizes: tuple[int, ...] = (1, 4, 16, 64, 160)
    mixes: int = 4
    co_len_min: int = 16
    co_len_max: int = 4096
    chunk_sizes: tuple[int, ...] = (64, 256)
    page_sizes: tuple[int, ...] = (16, 64)
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kind != "consistency":
            raise bad_value("kind", self.kind, "'consistency'")
        from attnum.attention.serving.decode import check_decodable

        check_decodable(parse_policy(self.policy))  # every way but prefill decodes: no low-bit substitution
        for name in ("length", "first_position", "positions", "heads", "kv_heads", "head_dim", "mixes",
                     "co_len_min", "co_len_max"):
            _ints(name, getattr(self, name))
        if self.first_position >= self.length:
            raise bad_value("first_position", self.first_position, f"below length={self.length}")
        if self.heads % self.kv_heads:
            raise bad_value("kv_heads", self.kv_heads, f"a divisor of heads={self.heads}")
        if self.device not in ("cpu", "cuda"):
            raise bad_value("device", self.device, "cpu or cuda")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise bad_value("device", self.device, "cpu here (CUDA is not available)")
        if self.co_len_min > self.co_len_max:
            raise bad_value("co_len_min", self.co_len_min, f"at most co_len_max={self.co_len_max}")
        rules = tuple(self.rules) if isinstance(self.rules, (list, tuple)) else tuple(str(self.rules).split(";"))
        object.__setattr__(self, "rules", tuple(parse_split_rule(r).label for r in rules))
        for name in ("batch_sizes", "chunk_sizes", "page_sizes"):
            object.__setattr__(self, name, _ints(name, getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def require_memory(self) -> None:
        """Refuse (AttnumEnvironmentError, one line) a study larger than this machine's memory: the CLI
        before it starts, a sweep spec before any point runs (attnum.sweep.memory_budget)."""
        from attnum.sweep.memory_budget import require_consistency

        require_consistency(self)

    def query_positions(self) -> list[int]:
        """``positions`` query positions from ``first_position`` to length - 1 (the last included)."""
        n, a, b = self.positions, self.first_position, self.length - 1
        return sorted({a + round(i * (b - a) / max(1, n - 1)) for i in range(n)})

    def co_lengths(self, B: int, mix: int) -> list[int]:
        """The B - 1 other requests' lengths of mix ``mix`` (log-uniform, seeded)."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + B * 1009 + mix)
        u = torch.rand(B - 1, generator=g, dtype=torch.float64)
        lo, hi = math.log(self.co_len_min), math.log(self.co_len_max)
        return [int(round(math.exp(lo + float(x) * (hi - lo)))) for x in u]
