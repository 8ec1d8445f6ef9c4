"""One sweep point: a :class:`CompareConfig` plus what to run at it, and a stable key.

A point is a ``compare`` point (the emulated flash and baseline against the float64 golden,
under a policy and tiles), an ``attribute`` point (the same comparison as an error budget per
rounding site, :mod:`attnum.studies.paper.attribute`) or a ``kernels`` point (the real kernels
available here against the same golden, in the point's native dtype). Kernel points ignore the
policy and tiles, so many compare
points share one kernel point; the key makes that sharing automatic.

The fields, their defaults and their validation are CompareConfig's (one set, in
:mod:`attnum.studies.paper.compare`); a point adds ``kind`` and two sweep rules: its policy names no
format (the ``format`` axis gives it), and a kernel point leaves the emulation's fields unset.

Key stability: the key hashes :meth:`Point.identity`, the config without the fields added after
the first stores were made (``kv_len``, ``kv_heads``, ``causal_alignment``) while they hold their
defaults, so stores made before those fields existed keep their keys and resume.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from attnum.errors import bad_value
from attnum.numerics.formats import TORCH_DTYPE_NAMES
from attnum.studies.paper.compare import FIELDS, CompareConfig
from attnum.sweep.axes import POLICY_NAMES

COMPARISONS = ("flash_vs_golden", "baseline_vs_golden", "flash_vs_baseline", "kernels")
KINDS = ("compare", "kernels", "attribute")
AXES = tuple(FIELDS)  # every CompareConfig field is a sweep axis
# Axes that only matter to the emulation; a kernel point leaves them at their defaults, and its
# stored config says policy None (it runs none).
EMULATION_ONLY = ("policy", "baseline_policy", "block_q", "block_k", "sram", "swap_blocks", "square", "variant",
                  "kv_order", "mma")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CompareConfig)}
# Fields added after the first stores: left out of the key while at their default (see module doc).
_ADDED = ("kv_len", "kv_heads", "causal_alignment", "baseline_policy", "mma")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Point(CompareConfig):
    """One configuration to run: CompareConfig's fields (the sweep axes) and ``kind``."""

    kind: str = "compare"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise bad_value("kind", self.kind, f"one of {KINDS}")
        super().__post_init__()
        for name in ("policy", "baseline_policy"):
            value = getattr(self, name)
            if value is not None and value.split(",")[0] not in POLICY_NAMES:
                raise bad_value(name, value, f"NAME[,site=FORMAT...] with NAME in {POLICY_NAMES} "
                                "(in a sweep the format axis gives the format)")
            if value is not None and "," in value:  # overrides in any order name one policy: one key, one hash
                head, *over = (part.strip() for part in value.split(","))
                object.__setattr__(self, name, ",".join([head, *sorted(over)]))
        if self.kind == "kernels":
            if self.format not in TORCH_DTYPE_NAMES:
                raise bad_value("format", self.format, f"a format torch has a dtype for ({sorted(TORCH_DTYPE_NAMES)}) "
                                "in a kernels point")
            for name in EMULATION_ONLY:
                if getattr(self, name) != _DEFAULTS[name]:
                    raise bad_value(name, getattr(self, name), f"unset ({_DEFAULTS[name]!r}) in a kernels point: "
                                    "real kernels have their own policy and tiles")

    def cost_features(self) -> tuple[float, ...]:
        """What this point's work scales with, for the sweep's ETA (:mod:`attnum.sweep.eta`): a kernels
        point runs real kernels (~3 per score element), an attribute point ~16 emulated runs (each
        site alone and each site exact, for flash and baseline), a compare point 2."""
        from attnum.sweep.eta import attention_features

        if self.kind == "kernels":
            return attention_features(self, runs=0, kernel_runs=3.0)
        return attention_features(self, runs=16 if self.kind == "attribute" else 2)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Point:
        """The point a :meth:`config` dict (a stored row's ``config``) describes (other kinds:
        :func:`attnum.sweep.registry.point_from_config`)."""
        cfg = dict(config)
        if cfg.get("kind") == "kernels" and cfg.get("policy") is None:
            cfg.pop("policy", None)
        return cls(**cfg)

    def config(self) -> dict[str, Any]:
        """The point as plain JSON-able data (the row's ``config``): every field and ``kind``."""
        out = {"kind": self.kind, **self.to_dict()}
        if self.kind == "kernels":
            out["policy"] = None
        if out.get("mma") is None:  # the newest field: unset, it is not written (stores before it read as they are)
            out.pop("mma", None)
        return out

    def identity(self) -> dict[str, Any]:
        """What the key hashes: :meth:`config` less the added fields at their defaults."""
        return {k: v for k, v in self.config().items() if not (k in _ADDED and v == _DEFAULTS[k])}

    @property
    def key(self) -> str:
        """Hash of the canonical config: equal configs share one row in the store."""
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def compare_config(self) -> CompareConfig:
        """The plain :class:`CompareConfig` of this point (what ``run_compare`` records)."""
        return CompareConfig(**self.to_dict())

    def kernel_point(self) -> Point | None:
        """The real-kernel point at the same inputs, or None when the format has no torch dtype."""
        if self.kind != "compare" or self.format not in TORCH_DTYPE_NAMES:
            return None
        return dataclasses.replace(self, kind="kernels", **{name: _DEFAULTS[name] for name in EMULATION_ONLY})

    def label(self) -> str:
        shape = f"N={self.seq_len}" + (f" S={self.kv_len}" if self.kv_len is not None else "")
        shape += f" d={self.head_dim}" + (f" H={self.heads}/G={self.kv_heads}" if self.kv_heads is not None else "")
        if self.causal:
            shape += " causal" + ("" if self.causal_alignment == "top_left" else f" {self.causal_alignment}")
        if self.kind == "kernels":
            return f"kernels {self.format} {shape} seed={self.seed}"
        tiles = f"M={self.sram}" if self.sram else f"Br={self.block_q} Bc={self.block_k}"
        extra = "".join(s for s, on in ((" swap", self.swap_blocks), (" square", self.square)) if on)
        if self.baseline_policy is not None:
            extra += f" baseline={self.baseline_policy}"
        if self.dist != "normal":
            extra += f" dist={self.dist}"
        if self.mma is not None:
            extra += f" mma={self.mma}"
        head = "attribute " if self.kind == "attribute" else ""
        return f"{head}{self.policy}:{self.format} {self.variant} {shape} {tiles}{extra} seed={self.seed}"
