"""The audit's configuration: one frozen dataclass whose fields map 1:1 onto ``attnum audit`` flags."""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnum.errors import AttnumInputError, bad_value
from attnum.kernels import conventions
from attnum.numerics.formats import get_format

AUDIT_FORMATS = ("bf16", "fp16", "fp32")  # the dtypes torch's kernels take (names from attnum.numerics.formats)
DEVICES = ("cpu", "cuda")


def parse_dtypes(text: str | tuple[str, ...]) -> tuple[str, ...]:
    """"bf16,fp16" -> ("bf16", "fp16"); any alias attnum.numerics.formats knows ("bfloat16", "half", ...),
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


MAX_TIMEOUT = 7 * 24 * 3600.0  # seconds; a week is no longer a timeout
DEFAULT_TIMEOUT = 300.0
"""Seconds the isolated target may stay silent (one call of the target, or attnum's judging of
one case) before the probe is "timed out": the slowest default case takes ~10 s on 2 CPU cores."""
MAX_SEED = 2**63  # exclusive: seeds are mixed into torch.Generator.manual_seed (64-bit)


def _finite(name: str, value: object, allowed: str, *, positive: bool, upper: float = math.inf) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
        value > 0 if positive else value >= 0) and value <= upper
    if not ok:
        raise bad_value(name, value, allowed)
    return float(value)


def check_timeout(value: object, *, param: str = "timeout") -> float:
    """Seconds a silent target is given, as every command takes them: finite, > 0, at most a week."""
    return _finite(param, value, f"seconds, > 0 and <= {MAX_TIMEOUT:g}", positive=True, upper=MAX_TIMEOUT)


@dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """What to audit and how strictly.

    k, floor_ulps: the verdict rule (see attnum.audit.verdict); k_grad: multiplier for gradients
    (flash-attn's 3x for dq/dk/dv). causal_alignment ("top_left"/"bottom_right") and empty_rows
    ("zeros", "nan", "mean-v", "any"): the conventions to judge by (attnum.kernels.conventions);
    None takes the target's declaration, else SDPA's (top-left, zeros). probes: names, or None for
    the default set. timeout: seconds a silent target is given per case; isolate: run the target in
    a child process (attnum.audit.isolate), so a crash, hang or exit becomes a verdict. target: a
    name, or None when the callable is passed to ``run_audit`` directly. numerics: the arithmetic of
    interpreted Triton kernels ("faithful": the GPU's, "raw": Triton's interpreter as is,
    "faithful-ex2-approx"; see attnum.kernels.triton.faithful). arch: the GPU whose tensor cores an
    interpreted kernel's tl.dot runs on under faithful numerics (sm80, sm89, sm90, sm100). emulation: a policy naming the
    target's designed arithmetic (``sage1``) to judge forward cases against instead of the rule, ""
    to turn a declared one off, None to take the target's declaration (attnum.audit.emulated).
    """

    target: str | None = None
    dtypes: tuple[str, ...] = ("bf16", "fp16", "fp32")
    device: str = "cpu"
    probes: tuple[str, ...] | None = None
    strict: bool = False
    k: float = 2.0
    k_grad: float = 5.0
    floor_ulps: float = 2.0
    empty_rows: str | None = None
    causal_alignment: str | None = None
    seed: int = 0
    timeout: float = DEFAULT_TIMEOUT
    isolate: bool = True
    numerics: str = "faithful"
    arch: str = "sm90"
    emulation: str | None = None

    def __post_init__(self) -> None:
        if self.target is not None and (not self.target or not isinstance(self.target, str)):
            raise bad_value("target", self.target, "module:function, path/file.py:function, a built-in name, or "
                                                   "None with a callable passed to run_audit")
        from attnum.kernels.triton.interp import check_numerics

        check_numerics(self.numerics)
        from attnum.kernels.triton.tensor_core import DEFAULT_ARCH, check_arch

        object.__setattr__(self, "arch", check_arch(self.arch))
        if self.numerics == "raw" and self.arch != DEFAULT_ARCH:  # raw's tl.dot has no tensor-core model
            raise bad_value("arch", self.arch, f"{DEFAULT_ARCH} (the default) with numerics='raw': Triton's raw "
                            "interpreter has no tensor-core model, so an architecture changes nothing")
        object.__setattr__(self, "dtypes", parse_dtypes(self.dtypes))
        if self.target is not None:  # a built-in policy target compare would refuse: refused before any work
            from attnum.kernels.registry import check_policy_target

            check_policy_target(self.target, self.dtypes)
        if self.device not in DEVICES:
            raise bad_value("device", self.device, f"one of {DEVICES}")
        object.__setattr__(self, "k", _finite("k", self.k, "a finite positive multiplier", positive=True))
        object.__setattr__(self, "k_grad", _finite("k_grad", self.k_grad, "a finite positive multiplier",
                                                   positive=True))
        object.__setattr__(self, "floor_ulps", _finite("floor_ulps", self.floor_ulps,
                                                       "a finite non-negative number of ULPs", positive=False))
        object.__setattr__(self, "timeout", check_timeout(self.timeout))
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < MAX_SEED:
            raise bad_value("seed", self.seed, "an integer, 0 <= seed < 2**63")
        if self.empty_rows is not None:
            object.__setattr__(self, "empty_rows", conventions.empty_rows(self.empty_rows))
        if self.causal_alignment is not None:
            object.__setattr__(self, "causal_alignment", conventions.causal_alignment(self.causal_alignment))
        if self.emulation is not None:
            from attnum.kernels.conventions import check_emulation

            object.__setattr__(self, "emulation", check_emulation(self.emulation) or "")
        if self.probes is not None:
            from attnum.audit.probes import select

            object.__setattr__(self, "probes", tuple(p.name for p in select(self.probes)))
