"""The audit's configuration: one frozen dataclass whose fields map 1:1 onto ``attnum audit`` flags."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnum.audit.harness import EMPTY_ROW_CONVENTIONS
from attnum.errors import bad_value

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
DEVICES = ("cpu", "cuda")


def parse_dtypes(text: str | tuple[str, ...]) -> tuple[str, ...]:
    """"bf16,fp16" -> ("bf16", "fp16"); aliases accepted, order kept, duplicates dropped."""
    items = [t.strip().lower() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    names = [ALIASES.get(t, t) for t in items]
    bad = [t for t in names if t not in DTYPES]
    if bad or not names:
        raise bad_value("dtype", text, f"a comma-separated subset of {list(DTYPES)}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """What to audit and how strictly.

    k, floor_ulps: the verdict rule (see attnum.audit.verdict); k_grad: multiplier for gradients
    (flash-attn's 3x for dq/dk/dv). empty_rows: the expected output of rows with nothing to attend
    to ("zeros" as torch >= 2.5, or "nan"). probes: names, or None for the default set.
    """

    target: str
    dtypes: tuple[str, ...] = ("bf16", "fp16", "fp32")
    device: str = "cpu"
    probes: tuple[str, ...] | None = None
    strict: bool = False
    k: float = 2.0
    k_grad: float = 5.0
    floor_ulps: float = 2.0
    empty_rows: str = "zeros"
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.target:
            raise bad_value("target", self.target, "module:function, path/file.py:function or a built-in name")
        object.__setattr__(self, "dtypes", parse_dtypes(self.dtypes))
        if self.device not in DEVICES:
            raise bad_value("device", self.device, f"one of {DEVICES}")
        if not self.k > 0:
            raise bad_value("k", self.k, "a positive multiplier")
        if not self.k_grad > 0:
            raise bad_value("k_grad", self.k_grad, "a positive multiplier")
        if not self.floor_ulps >= 0:
            raise bad_value("floor_ulps", self.floor_ulps, "a non-negative number of ULPs")
        if self.empty_rows not in EMPTY_ROW_CONVENTIONS:
            raise bad_value("empty_rows", self.empty_rows, f"one of {EMPTY_ROW_CONVENTIONS}")
        if self.probes is not None:
            from attnum.audit.probes import select

            object.__setattr__(self, "probes", tuple(p.name for p in select(self.probes)))
