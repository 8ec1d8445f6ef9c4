"""One sweep point: its axes, their allowed values, and a stable key.

A point is either a ``compare`` point (the emulated flash and baseline against the float64 golden,
under a policy and tiles) or a ``kernels`` point (the real kernels available here against the same
golden, in the point's native dtype). Kernel points ignore the policy and tiles, so many compare
points share one kernel point; the key makes that sharing automatic.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

COMPARISONS = ("flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline", "kernels")
KINDS = ("compare", "kernels")
VARIANTS = ("fa1", "fa2")
KV_ORDERS = ("forward", "reverse", "random", "random:SEED")
_KV_ORDER_RE = re.compile(r"^(forward|reverse|random(:\d+)?)$")
DISTS = ("normal", "uniform", "outlier")
POLICY_NAMES = ("uniform", "fa2", "torch-cpu")
# Formats a real kernel can run in: torch has a dtype for them.
NATIVE_FORMATS = {"fp64": "float64", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
_ALIASES = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
DEVICES = ("cpu", "cuda")
# Axes that only matter to the emulation; a kernel point drops them.
_COMPARE_ONLY = ("policy", "block_q", "block_k", "sram", "swap_blocks", "square", "variant", "kv_order")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Point:
    """One configuration to run. Fields are the sweep axes; ``None`` tiles mean the core's default."""

    kind: str = "compare"
    format: str = "bf16"
    policy: str | None = "fa2"
    seq_len: int = 1024
    head_dim: int = 64
    batch: int = 1
    heads: int = 2
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
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} must be one of {KINDS}")
        object.__setattr__(self, "format", _ALIASES.get(self.format, self.format))
        for f in dataclasses.fields(self):
            if f.name == "kind" or (self.kind == "kernels" and f.name in _COMPARE_ONLY):
                continue
            problem = check_axis_value(f.name, getattr(self, f.name))
            if problem is not None:
                raise ValueError(f"{f.name}={getattr(self, f.name)!r} is not allowed; expected {problem}")
        if self.sram is not None and (self.block_q is not None or self.block_k is not None):
            raise ValueError(f"sram={self.sram} and block_q/block_k are exclusive; give one or the other")

    def config(self) -> dict[str, Any]:
        """The point as plain JSON-able data (the row's ``config``)."""
        return dataclasses.asdict(self)

    @property
    def key(self) -> str:
        """Hash of the canonical config: equal configs share one row in the store."""
        blob = json.dumps(self.config(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def kernel_point(self) -> Point | None:
        """The real-kernel point at the same inputs, or None when the format has no torch dtype."""
        if self.kind != "compare" or self.format not in NATIVE_FORMATS:
            return None
        blank = {name: None for name in ("policy", "block_q", "block_k", "sram")}
        return dataclasses.replace(
            self, kind="kernels", swap_blocks=False, square=False, variant="fa2", kv_order="forward", **blank
        )

    def label(self) -> str:
        if self.kind == "kernels":
            return f"kernels {self.format} N={self.seq_len} d={self.head_dim} seed={self.seed}"
        tiles = f"M={self.sram}" if self.sram else f"Br={self.block_q} Bc={self.block_k}"
        extra = "".join(s for s, on in ((" swap", self.swap_blocks), (" square", self.square)) if on)
        return (
            f"{self.policy}:{self.format} {self.variant} N={self.seq_len} d={self.head_dim} "
            f"{tiles}{extra} seed={self.seed}"
        )


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _opt_positive_int(v: Any) -> bool:
    return v is None or _positive_int(v)


def _check_format(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    from attnum.formats import get_format

    try:
        get_format(_ALIASES.get(v, v))
    except (ValueError, KeyError):
        return False
    return True


def _check_policy(v: Any) -> bool:
    if not isinstance(v, str) or not v:
        return False
    name, *overrides = v.split(",")
    if name not in POLICY_NAMES:
        return False
    if not overrides:
        return True
    from attnum.policy import parse_policy

    try:
        parse_policy(compose_policy(v, "fp32"))
    except (ValueError, KeyError):
        return False
    return True


def compose_policy(policy: str, fmt: str) -> str:
    """``"fa2,acc=fp16"`` at format ``bf16`` -> ``"fa2:bf16,acc=fp16"`` (the core's policy syntax)."""
    name, *overrides = policy.split(",")
    return ",".join([f"{name}:{fmt}", *overrides])


# axis -> (what is allowed, check)
AXES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "format": ("a format name (fp64, fp32, tf32, bf16, fp16, e5m2, e4m3fn, ..., or eXmY)", _check_format),
    "policy": (f"one of {POLICY_NAMES}, optionally with ',site=fmt' overrides", _check_policy),
    "seq_len": ("a positive integer", _positive_int),
    "head_dim": ("a positive integer", _positive_int),
    "batch": ("a positive integer", _positive_int),
    "heads": ("a positive integer", _positive_int),
    "block_q": ("a positive integer (Br)", _opt_positive_int),
    "block_k": ("a positive integer (Bc)", _opt_positive_int),
    "sram": ("a positive integer (M, the SRAM size that sets Br and Bc)", _opt_positive_int),
    "swap_blocks": ("true or false", lambda v: isinstance(v, bool)),
    "square": ("true or false", lambda v: isinstance(v, bool)),
    "variant": (f"one of {VARIANTS}", lambda v: v in VARIANTS),
    "kv_order": (f"one of {KV_ORDERS}", lambda v: isinstance(v, str) and bool(_KV_ORDER_RE.match(v))),
    "causal": ("true or false", lambda v: isinstance(v, bool)),
    "dist": (f"one of {DISTS}", lambda v: v in DISTS),
    "logit_scale": ("a positive number (multiplies Q)", lambda v: isinstance(v, (int, float))
                    and not isinstance(v, bool) and 0 < v < float("inf")),
    "seed": ("a non-negative integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "device": (f"one of {DEVICES}", lambda v: v in DEVICES),
}


def check_axis_value(key: str, value: Any) -> str | None:
    """None when ``value`` is allowed for axis ``key``, else a description of what is allowed."""
    allowed, ok = AXES[key]
    return None if ok(value) else allowed


def check_point(point: Point) -> None:
    """Let the core validate the point (tiles, formats) without running it; raises ValueError."""
    if point.kind == "compare":
        from attnum.experiments.point_runner import compare_config

        compare_config(point)
