"""The verdict rule: is a kernel's error explained by the precision it runs in?

The rule follows FlashAttention's and PyTorch's own test suites:
three computations of the same case,

- ``golden``   float64 attention on the (already low-precision) inputs,
- ``baseline`` a plain same-precision attention on the same inputs,
- ``target``   the kernel under audit,

and the target passes when every element i whose golden value is finite satisfies

    |t_i - g_i| <= k * err_baseline + floor_ulps * ulp(fmt, max |g|) + c(fmt, n) * T_i,
    err_x      = max |x - golden| over finite golden entries,
    T_i        = sum_j |a_ij b_j|, the size of the n terms that sum to g_i (float64, golden side),
    c(fmt, n)  = u_fmt + sqrt(n) * u_acc,   u = eps / 2, u_acc = min(u_fmt, u_fp32).

The first two terms are FlashAttention's rule: ``ulp(fmt, a)`` is the spacing of ``fmt`` at the
output's scale (:func:`attnum.numerics.metrics.ulp`), the floor FA3 writes ``2 * max|(ref + 0.3 - 0.3) - ref|``.
The third is the rounding-error analysis of a sum of n products whose factors are materialised in
the format and accumulated in fp32 (or the format, when wider): ``u_fmt`` is one rounding of every
term, ``sqrt(n) u_acc`` the accumulation (Higham & Mary's probabilistic form of gamma_n; see
docs/audit.md). It matters only where the sum cancels (T_i >> |g_i|): there both the target's and
the baseline's errors are noise of size ~u T_i, and k x baseline alone is a coin toss. T depends
only on golden-side values and the format, never on the target.

Non-finite target entries where golden is finite fail outright, whatever the numbers (``nan <= x``
is False, so FA's suite fails them too); where golden is non-finite (the "NaN" empty-row convention)
the target must be non-finite as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.numerics import metrics
from attnum.numerics.formats import FloatFormat, get_format

ABORTED = ("crashed", "timed out", "exited")
"""The process running the target died under a probe: killed by a signal (``crashed``, e.g.
SIGSEGV), silent past the per-case timeout (``timed out``), or ended by the target itself
(``exited``, any exit code, 0 included). See attnum.audit.isolate."""

OUT_OF_BOUNDS = "out of bounds"
"""An interpreted Triton kernel loaded or stored outside the tensor argument its pointer was derived
from (attnum.kernels.triton.addresses): found by checking the address, whatever the values."""

STATUSES = ("pass", "fail", "unwritten", OUT_OF_BOUNDS, "error", "unsupported", "note", *ABORTED)
"""pass/fail: the rule's answer. error: the kernel raised. unsupported: the kernel refused this
input (NotImplementedError, or torch's "no available kernel"). note: a behaviour probe deviated;
reported, failing only under --strict. unwritten: output elements the target was given to write
(poisoned buffers, attnum.kernels.serving ``accepts_out``) still hold the poison. out of bounds: see
:data:`OUT_OF_BOUNDS`. crashed / timed out / exited: see :data:`ABORTED`."""

FAILING = frozenset(("fail", "unwritten", OUT_OF_BOUNDS, "error", *ABORTED))
"""The statuses that count against the target: everything else is a pass, a note or a refusal."""

# Order used to pick the case that represents a probe: the worst one wins. "unsupported" ranks
# lowest, so a probe whose other cases ran shows their verdict (and counts the refusals in its note);
# an access out of bounds outranks a wrong value (it is the cause, and the GPU may fault on it); a dead
# process ranks above every answer, since the probe did not finish.
SEVERITY = {"unsupported": 0, "pass": 1, "note": 2, "error": 3, "fail": 4, "unwritten": 4, OUT_OF_BOUNDS: 5,
            "exited": 6, "timed out": 6, "crashed": 6}

NO_MARGIN = frozenset(("error", "unsupported", "unwritten", OUT_OF_BOUNDS, *ABORTED))
"""Statuses without a margin: nothing was compared."""

NEAR_BOUND = 0.8
"""A pass that used more than this share of its bound is flagged "near bound": one more unlucky
rounding and it would fail."""

_FP32 = get_format("fp32")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The outcome of one case: the numbers of its element closest to (or furthest past) its bound.

    ``target_error`` and ``bound`` belong to that element, so ``ratio = target_error / bound`` is the
    case's margin; ``terms_floor`` is the share of the bound that the size of the element's terms
    contributed (0 when the rule had no terms); ``baseline_error`` is the baseline's max error.
    """

    status: str
    target_error: float
    baseline_error: float
    bound: float
    terms_floor: float = 0.0
    note: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"{self.status=} must be one of {STATUSES}")

    @property
    def passed(self) -> bool:
        """Only :data:`FAILING` statuses count against the target."""
        return self.status not in FAILING

    @property
    def ratio(self) -> float:
        """How much of the bound the target used; > 1 means fail."""
        if self.status in NO_MARGIN:
            return 0.0
        if not math.isfinite(self.target_error):
            return math.inf
        return self.target_error / self.bound if self.bound > 0 else (0.0 if self.target_error == 0 else math.inf)

    @property
    def near_bound(self) -> bool:
        """A pass that used more than :data:`NEAR_BOUND` of its bound."""
        return self.status == "pass" and self.ratio > NEAR_BOUND


def ulp(fmt: FloatFormat, magnitude: float) -> float:
    """Spacing of ``fmt``'s grid at ``magnitude``: :func:`attnum.numerics.metrics.ulp` (the one definition)."""
    return metrics.ulp(float(magnitude), fmt)


def unit_roundoff(fmt: FloatFormat) -> float:
    """u = eps / 2: the relative error bound of one round-to-nearest in ``fmt``."""
    return fmt.eps / 2


def terms_coefficient(fmt: FloatFormat, n: int) -> float:
    """c(fmt, n) = u_fmt + sqrt(n) * u_acc: the error, relative to sum_j |a_j b_j|, of a sum of
    n products whose factors are rounded once to ``fmt`` and accumulated in fp32 (or ``fmt`` if
    wider). The derivation is in docs/audit.md ("Sums that cancel")."""
    if n < 0:
        raise ValueError(f"{n=} must be non-negative")
    u_acc = min(unit_roundoff(fmt), unit_roundoff(_FP32))
    return unit_roundoff(fmt) + math.sqrt(n) * u_acc


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
    terms: torch.Tensor | None = None,
    n_terms: int = 0,
    extra_floor: torch.Tensor | None = None,
) -> Verdict:
    """Apply the rule to one case. All tensors share a shape; they are compared in float64.

    ``terms``: T_i = sum_j |a_ij b_j| for each element (golden side, float64), summed over
    ``n_terms`` products; None leaves FA's rule alone (k x baseline + ulp floor). ``extra_floor``: a
    per-element allowance already in output units (golden side, e.g. the score-order terms of
    :func:`attnum.audit.terms.score_order_terms` times their coefficient), added to the terms floor.
    """
    if k <= 0 or floor_ulps < 0:
        raise ValueError(f"{k=} must be positive and {floor_ulps=} non-negative")
    if target.shape != golden.shape:
        return Verdict(status="fail", target_error=math.inf, baseline_error=math.nan, bound=math.nan,
                       note=f"output shape {tuple(target.shape)} != expected {tuple(golden.shape)}")
    if terms is not None and terms.shape != golden.shape:
        raise ValueError(f"terms.shape={tuple(terms.shape)} must be golden's {tuple(golden.shape)}")
    t, g, b = target.double(), golden.double(), baseline.double()
    finite = torch.isfinite(g)
    b_err = math.inf if bool((~torch.isfinite(b) & finite).any()) else _max_abs((b - g)[finite])
    scale = _max_abs(g[finite])
    uniform = k * b_err + floor_ulps * ulp(fmt, scale)
    bad = ~torch.isfinite(t) & finite
    if bool(bad.any()):
        kind = "NaN" if bool(torch.isnan(t[bad]).any()) else "Inf"
        return Verdict(status="fail", target_error=math.inf, baseline_error=b_err, bound=uniform,
                       note=f"{kind} in {int(bad.sum())} element(s) where golden is finite")
    missed = torch.isfinite(t) & ~finite
    if bool(missed.any()):
        return Verdict(status="fail", target_error=math.inf, baseline_error=b_err, bound=uniform,
                       note=f"finite output in {int(missed.sum())} element(s) declared NaN (empty rows)")
    err = (t - g)[finite].abs()
    if err.numel() == 0:
        return Verdict(status="pass", target_error=0.0, baseline_error=b_err, bound=uniform)
    extra = (terms.double()[finite] * terms_coefficient(fmt, n_terms) if terms is not None
             else torch.zeros_like(err))
    if extra_floor is not None:
        extra = extra + extra_floor.double()[finite]
    bound = uniform + extra  # per element
    # The element that used most of its bound speaks for the case (0/0 counts as 0).
    ratio = torch.where(bound > 0, err / bound, torch.where(err > 0, math.inf, 0.0))
    i = int(ratio.argmax())
    status = "pass" if bool((err <= bound).all()) else "fail"
    return Verdict(status=status, target_error=float(err[i]), baseline_error=b_err, bound=float(bound[i]),
                   terms_floor=float(extra[i]))
