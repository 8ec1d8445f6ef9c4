"""The audit's configuration: one frozen dataclass whose fields map 1:1 onto ``attnum audit`` flags."""

from __future__ import annotations

from dataclasses import dataclass

from attnum.audit.harness import EMPTY_ROW_CONVENTIONS
from attnum.errors import AttnumInputError, bad_value
from attnum.formats import get_format

AUDIT_FORMATS = ("bf16", "fp16", "fp32")  # the dtypes torch's kernels take (names from attnum.formats)
DEVICES = ("cpu", "cuda")


def parse_dtypes(text: str | tuple[str, ...]) -> tuple[str, ...]:
    """"bf16,fp16" -> ("bf16", "fp16"); any alias attnum.formats knows ("bfloat16", "half", ...),
    order kept, duplicates dropped."""
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    allowed = f"a comma-separated subset of {list(AUDIT_FORMATS)}"
    try:
        names = [get_format(t, param="dtype").name for t in items]
    except AttnumInputError:
        raise bad_value("dtype", text, allowed) from None
    if not names or any(n not in AUDIT_FORMATS for n in names):
        raise bad_value("dtype", text, allowed)
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
