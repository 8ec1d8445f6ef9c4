"""Sweep points of the low-bit study (``kind = "lowbit"``): one scheme on one input, against float64.

:class:`LowbitPoint` runs :func:`attnum.attention.flash_attention` under ``policy`` (a sage or FA
policy name; the ``format`` is its input/output format) with the new knobs as axes -- each ``None``
keeps the policy's own value -- and stores SageAttention's three metrics (``cossim``, ``rel_l1``,
``rmse``) and ``seconds``. :data:`LOWBIT_FIELDS` holds each axis's validator.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from attnum.errors import bad_value
from attnum.numerics.formats import get_format
from attnum.numerics.lowbit import ACC_FORMATS, GRANULARITIES, PV_FORMATS, QK_FORMATS
from attnum.numerics.policy import EXP2, NAMED, parse_policy
from attnum.sweep.axes import COMMON, is_bool, positive_int
from attnum.sweep.point import StudyPoint, from_config
from attnum.workloads.inputs import DISTS


def _opt(check):
    return lambda v: v is None or check(v)


def _threshold(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")


LOWBIT_FIELDS: dict[str, tuple[str, Any]] = {
    "scheme": (f"one of {tuple(NAMED)}", lambda v: v in NAMED),
    "dist": (f"one of {DISTS}", lambda v: v in DISTS),
    "qk": (f"unset or one of {QK_FORMATS}", _opt(lambda v: v in QK_FORMATS)),
    "granularity": (f"unset or one of {GRANULARITIES}", _opt(lambda v: v in GRANULARITIES)),
    "smooth_k": ("unset, true or false", _opt(is_bool)),
    "smooth_q": ("unset, true or false", _opt(is_bool)),
    "pv": (f"unset or one of {PV_FORMATS}", _opt(lambda v: v in PV_FORMATS)),
    "pv_acc": (f"unset or one of {tuple(ACC_FORMATS)}", _opt(lambda v: v in ACC_FORMATS)),
    "two_level": ("unset, true or false", _opt(is_bool)),
    "block_k": ("unset or a positive integer (keys per tile and per K scale block)", _opt(positive_int)),
    "rescale_threshold": ("unset or a positive finite number of log2 units", _opt(_threshold)),
    "exp2": (f"unset or one of {EXP2}", _opt(lambda v: v in EXP2)),
}
_KNOBS = ("qk", "granularity", "smooth_k", "smooth_q", "pv", "pv_acc", "two_level", "block_k")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LowbitPoint(StudyPoint):
    kind: str = "lowbit"
    scheme: str = "sage1"
    format: str = "fp16"
    dist: str = "kbias"
    qk: str | None = None
    granularity: str | None = None
    smooth_k: bool | None = None
    smooth_q: bool | None = None
    pv: str | None = None
    pv_acc: str | None = None
    two_level: bool | None = None
    block_k: int | None = None
    rescale_threshold: float | None = None
    exp2: str | None = None
    seq_len: int = 1024
    heads: int = 2
    head_dim: int = 64
    batch: int = 1
    causal: bool = False
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.kind != "lowbit":
            raise bad_value("kind", self.kind, "'lowbit'")
        for f in dataclasses.fields(self):
            if f.name == "kind":
                continue
            allowed, ok = LOWBIT_FIELDS.get(f.name) or COMMON[f.name]
            if not ok(getattr(self, f.name)):
                raise bad_value(f.name, getattr(self, f.name), allowed)
        if self.device != "cpu":
            raise bad_value("device", self.device, "'cpu' (the emulation runs on CPU)")
        object.__setattr__(self, "format", get_format(self.format).name)
        if self.rescale_threshold is not None:
            object.__setattr__(self, "rescale_threshold", float(self.rescale_threshold))
        lb = self.policy().lowbit  # the combination parses (a sage knob needs a sage scheme, warp_q | block_q, ...)
        if lb is not None and lb.qk_is_block:  # NVFP4 Q, K: blocks of 16 along the head dim
            from attnum.numerics.mx import get_block_format

            block = get_block_format(lb.qk, param="qk").block
            if self.head_dim % block:
                raise bad_value("head_dim", self.head_dim, f"a multiple of {lb.qk}'s block of {block} "
                                f"for {self.scheme}")

    def require_memory(self) -> None:
        """Refuse a point larger than this machine's memory (a sweep spec asks before any point runs)."""
        from attnum.sweep.memory_budget import require_lowbit

        require_lowbit(batch=self.batch, heads=self.heads, seq_len=self.seq_len, head_dim=self.head_dim,
                       what="lowbit point", lower="seq_len, heads, head_dim or batch")

    def policy_spec(self) -> str:
        parts = [f"{self.scheme}:{self.format}"]
        for name in (*_KNOBS, "rescale_threshold", "exp2"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={int(value) if isinstance(value, bool) else value}")
        return ",".join(parts)

    def policy(self):
        return parse_policy(self.policy_spec())

    def run(self) -> dict[str, Any]:
        from attnum.attention import flash_attention, golden_attention
        from attnum.studies.lowbit.table import metrics
        from attnum.workloads.inputs import InputSpec, make_qkv

        q, k, v = make_qkv(InputSpec(batch=self.batch, heads=self.heads, seq_len=self.seq_len, head_dim=self.head_dim,
                                     dist=self.dist, seed=self.seed))
        gold = golden_attention(q, k, v, is_causal=self.causal)
        t0 = time.perf_counter()
        o = flash_attention(q, k, v, policy=self.policy(), is_causal=self.causal)
        return {**metrics(o, gold), "policy_spec": self.policy_spec(), "seconds": time.perf_counter() - t0}

    def label(self) -> str:
        return f"lowbit {self.policy_spec()} {self.dist} N={self.seq_len} seed={self.seed}"


def point_from_config(config: dict[str, Any]):
    return from_config(config, {"lowbit": LowbitPoint})
