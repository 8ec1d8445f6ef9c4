"""Sweep points of the ring-attention study (``kind = "ring"``).

A frozen config with one scalar value per axis, a stable key and :meth:`run`, which calls the
study itself at that one configuration and stores its one row flat:
:class:`RingPoint` -> :func:`attnum.studies.parallel.ring_study.run_ring` with one shard count,
layout and merge policy: ``max_abs``, ``mean_abs``, ``rmse`` against the fp64 golden, the
single-device flash beside it (``single_max_abs``, ``single_mean_abs``, ``ratio_to_single``),
``nan``, and the timings. Simulated backend only (``attnum ring --backend gloo`` runs real ranks).
``policy`` names no format; the ``format`` axis gives it, as in compare points.

:data:`RING_FIELDS` holds each axis's validator (what the spec checks first); the point's own
construction then checks the combination (e.g. P must divide N).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnum.attention.parallel.ring import LAYOUTS
from attnum.attention.serving.merge import METHODS
from attnum.errors import bad_value
from attnum.numerics.formats import get_format
from attnum.sweep.axes import POLICY_NAMES, accepts, positive_int
from attnum.sweep.point import StudyPoint, from_config

KINDS = ("ring",)


def _policy_ok(v: Any) -> bool:
    from attnum.numerics.policy import parse_policy

    return accepts(lambda x: parse_policy(x))(v)


RING_FIELDS: dict[str, tuple[str, Any]] = {
    "shards": ("a positive integer (P, ring ranks; N must split into P (contiguous) or 2P (zigzag) blocks)", positive_int),
    "layout": (f"one of {LAYOUTS}", lambda v: v in LAYOUTS),
    "merge_policy": ("a format or policy for the cross-shard merge (e.g. fp32, bf16)", _policy_ok),
    "merge_method": (f"one of {METHODS}", lambda v: v in METHODS),
    "backend": ("'sim' (sweeps run the simulated ring; attnum ring --backend gloo/nccl runs real ranks)",
                lambda v: v == "sim"),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RingPoint(StudyPoint):
    """One (shards, layout, merge policy) of ``attnum ring``, the other flags as axes."""

    kind: str = "ring"
    shards: int = 2
    layout: str = "contiguous"
    merge_policy: str = "fp32"
    merge_method: str = "lse"
    policy: str = "fa2"
    format: str = "bf16"
    seq_len: int = 4096
    heads: int = 4
    kv_heads: int | None = None
    head_dim: int = 64
    batch: int = 1
    causal: bool = True
    block_k: int | None = None
    seed: int = 0
    backend: str = "sim"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kind != "ring":
            raise bad_value("kind", self.kind, "'ring'")
        self.check_fields(RING_FIELDS)
        if self.policy.split(",")[0] not in POLICY_NAMES:
            raise bad_value("policy", self.policy, f"NAME[,site=FORMAT...] with NAME in {POLICY_NAMES} "
                            "(in a sweep the format axis gives the format)")
        object.__setattr__(self, "format", get_format(self.format).name)
        self.ring_config()  # P against N and layout, kv_heads against heads, ...

    def ring_policy(self) -> str:
        head, *sites = self.policy.split(",")
        return ",".join([f"{head}:{self.format}", *sites])

    def ring_config(self):
        from attnum.studies.parallel.ring_study import RingConfig

        return RingConfig(shards=(self.shards,), layout=(self.layout,), merge_policy=(self.merge_policy,),
                          policy=self.ring_policy(), merge_method=self.merge_method, seq_len=self.seq_len,
                          heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim, batch=self.batch,
                          causal=self.causal, block_k=self.block_k, seed=self.seed, backend=self.backend)

    def run(self) -> dict[str, Any]:
        from attnum.studies.parallel.ring_study import run_ring

        (row,) = run_ring(self.ring_config())["rows"]
        return {k: v for k, v in row.items() if k not in ("shards", "layout", "merge_policy", "backend")}

    def label(self) -> str:
        return (f"ring {self.ring_policy()} P={self.shards} {self.layout} merge={self.merge_policy} N={self.seq_len} "
                f"H={self.heads} d={self.head_dim}{' causal' if self.causal else ''} seed={self.seed}")


def point_from_config(config: dict[str, Any]):
    """The point a stored ``config`` dict describes (``kind`` ring)."""
    return from_config(config, {"ring": RingPoint})
