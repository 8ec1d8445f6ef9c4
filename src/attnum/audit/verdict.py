"""The verdict rule: is a kernel's error explained by the precision it runs in?

The rule follows FlashAttention's and PyTorch's own test suites (research/edge-cases.md §3):
three computations of the same case,

- ``golden``   float64 attention on the (already low-precision) inputs,
- ``baseline`` a plain same-precision attention on the same inputs,
- ``target``   the kernel under audit,

and the target passes when

    err_target <= k * err_baseline + floor,      err_x = max |x - golden| over finite golden entries,
    floor      = floor_ulps * ulp(fmt, max |golden|),

where ``ulp(fmt, a) = eps * 2**floor(log2 a)`` for normal ``a`` (the spacing of ``fmt`` at the
output's scale) and the smallest subnormal below the normal range. The floor plays the role of FA3's
``2 * max|(ref + 0.3 - 0.3) - ref|``: it keeps a case whose baseline happens to be exact (error 0)
from demanding bit-exactness. Non-finite target entries where golden is finite fail outright,
whatever the numbers (``nan <= x`` is False, so FA's suite fails them too); where golden is
non-finite (the "NaN" empty-row convention) the target must be non-finite as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum import metrics
from attnum.formats import FloatFormat

STATUSES = ("pass", "fail", "error", "unsupported", "note")
"""pass/fail: the rule's answer. error: the kernel raised. unsupported: the kernel refused this
input (NotImplementedError, or torch's "no available kernel"). note: a behaviour probe deviated;
reported, failing only under --strict."""

# Order used to pick the case that represents a probe: the worst one wins. "unsupported" ranks
# lowest, so a probe whose other cases ran shows their verdict (and counts the refusals in its note).
SEVERITY = {"unsupported": 0, "pass": 1, "note": 2, "error": 3, "fail": 4}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The outcome of one case: the three numbers and what they mean."""

    status: str
    target_error: float
    baseline_error: float
    bound: float
    note: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"{self.status=} must be one of {STATUSES}")

    @property
    def passed(self) -> bool:
        """Only fail and error count against the target."""
        return self.status not in ("fail", "error")

    @property
    def ratio(self) -> float:
        """How much of the bound the target used; > 1 means fail."""
        if self.status in ("error", "unsupported"):
            return 0.0
        if not math.isfinite(self.target_error):
            return math.inf
        return self.target_error / self.bound if self.bound > 0 else (0.0 if self.target_error == 0 else math.inf)


def ulp(fmt: FloatFormat, magnitude: float) -> float:
    """Spacing of ``fmt``'s grid at ``magnitude``: :func:`attnum.metrics.ulp` (the one definition)."""
    return metrics.ulp(float(magnitude), fmt)


def _max_abs(x: torch.Tensor) -> float:
    return float(x.abs().max()) if x.numel() else 0.0


def judge(
    target: torch.Tensor,
    golden: torch.Tensor,
    baseline: torch.Tensor,
    *,
    fmt: FloatFormat,
    k: float,
    floor_ulps: float,
) -> Verdict:
    """Apply the rule to one case. All three tensors share a shape; they are compared in float64."""
    if k <= 0 or floor_ulps < 0:
        raise ValueError(f"{k=} must be positive and {floor_ulps=} non-negative")
    if target.shape != golden.shape:
        return Verdict(status="fail", target_error=math.inf, baseline_error=math.nan, bound=math.nan,
                       note=f"output shape {tuple(target.shape)} != expected {tuple(golden.shape)}")
    t, g, b = target.double(), golden.double(), baseline.double()
    finite = torch.isfinite(g)
    b_err = math.inf if bool((~torch.isfinite(b) & finite).any()) else _max_abs((b - g)[finite])
    scale = _max_abs(g[finite])
    bound = k * b_err + floor_ulps * ulp(fmt, scale)
    bad = ~torch.isfinite(t) & finite
    if bool(bad.any()):
        kind = "NaN" if bool(torch.isnan(t[bad]).any()) else "Inf"
        return Verdict(status="fail", target_error=math.inf, baseline_error=b_err, bound=bound,
                       note=f"{kind} in {int(bad.sum())} element(s) where golden is finite")
    missed = torch.isfinite(t) & ~finite
    if bool(missed.any()):
        return Verdict(status="fail", target_error=math.inf, baseline_error=b_err, bound=bound,
                       note=f"finite output in {int(missed.sum())} element(s) declared NaN (empty rows)")
    t_err = _max_abs((t - g)[finite])
    status = "pass" if t_err <= bound else "fail"
    return Verdict(status=status, target_error=t_err, baseline_error=b_err, bound=bound)
