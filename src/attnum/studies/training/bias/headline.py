"""What the bias runs' curves say, computed from them (never written in advance).

- **Blow-up**: the first step whose loss is not finite, or whose loss averaged over the last
  ``SMOOTH`` steps (a fifth of a shorter run) exceeds ``BLOWUP`` times the lowest such average so far
  (batches differ, so single steps are noisy); a run that never does has not blown up.
- **Update bias**: ``update_bias`` (see :mod:`attnum.studies.training.bias.study`) averaged over the logged windows
  and the attention weights; ``update_signed`` likewise, and ``grad_bias`` for the raw gradients.
- **Accumulation**: ``coherence`` and ``lowrank`` of the summed update error at the last step
  (median over the attention weights); a random walk keeps coherence near 1, a fixed direction
  grows it like sqrt(steps).
- **Spectral norm**: sigma_1(W_T) / sigma_1(W_0) per attention weight, its largest, and the
  largest ratio to the fp32 run's same weight at the last step.
- **Ties**: the mean over logged steps of the fraction of attention tile rows with a tie at the max.
"""

from __future__ import annotations

import math
import statistics

from attnum.numerics.nanmath import nan_max

BLOWUP = 1.5
SMOOTH = 25
REFERENCE = "fp32"


def window(n: int) -> int:
    """The smoothing window for a run of ``n`` steps: SMOOTH, or n // 5 for short runs (>= 1)."""
    return max(1, min(SMOOTH, n // 5))


def smoothed(loss: list[float]) -> list[float]:
    """Mean of the last ``window(len(loss))`` losses at each step from the window's end on."""
    w = window(len(loss))
    return [sum(loss[i - w:i]) / w for i in range(w, len(loss) + 1)]


def blowup_step(loss: list[float]) -> int | None:
    """1-based step of the first blow-up (see the module docstring), or None."""
    bad = next((i for i, x in enumerate(loss, start=1) if not math.isfinite(x)), None)
    if bad is not None:
        return bad
    low = math.inf
    for i, x in enumerate(smoothed(loss), start=window(len(loss))):
        if x > BLOWUP * low:
            return i
        low = min(low, x)
    return None


def max_loss_ratio(loss: list[float]) -> float:
    """The largest smoothed loss over the lowest smoothed loss before it (1.0: never rose)."""
    sm, low, worst = smoothed(loss), math.inf, 1.0
    for x in sm:
        low = min(low, x)
        worst = max(worst, x / low)
    return worst if sm else math.nan


def _mean_windows(per_weight: dict[str, list[float]]) -> float:
    """Mean over weights of each weight's mean over the logged windows (the step-0 entry has none)."""
    vals = [statistics.fmean(v[1:]) for v in per_weight.values() if len(v) > 1]
    return statistics.fmean(vals) if vals else math.nan


def run_summary(r: dict, ref: dict | None) -> dict:
    loss = r["loss"]
    tail = loss[-max(1, len(loss) // 10):]
    growth = {k: (v[-1] / v[0] if v[0] else math.nan) for k, v in r["sigma"].items()}
    top = max(growth, key=lambda k: growth[k])
    vs_ref = {k: r["sigma"][k][-1] / ref["sigma"][k][-1] for k in r["sigma"]} if ref else {}
    return {
        "final_loss": statistics.fmean(tail),
        "blowup_step": blowup_step(loss),
        "max_loss_ratio": max_loss_ratio(loss),
        "sigma_growth": growth,
        "sigma_growth_max": growth[top],
        "sigma_growth_argmax": top,
        "sigma_vs_ref_max": nan_max(vs_ref.values()),
        "update_bias": _mean_windows(r["update_bias"]),
        "update_signed": _mean_windows(r["update_signed"]),
        "update_rel": _mean_windows(r["update_rel"]),
        "grad_bias": _mean_windows(r["grad_bias"]),
        "grad_rel": _mean_windows(r["grad_rel"]),
        "ties_tile": statistics.fmean(r["ties_tile"]) if r.get("ties_tile") else math.nan,
        "coherence": statistics.median(v[-1] for v in r["coherence"].values()),
        "lowrank": statistics.median(v[-1] for v in r["lowrank"].values()),
    }


def headline(runs: dict[str, dict], steps: int) -> dict:
    ref = runs.get(REFERENCE)
    s = {name: run_summary(r, ref if name != REFERENCE else None) for name, r in runs.items()}
    others = [n for n in runs if n != REFERENCE]
    blown = {n: v["blowup_step"] for n, v in s.items() if v["blowup_step"] is not None}
    lines = []
    if not blown:
        worst = max(s, key=lambda n: s[n]["max_loss_ratio"])
        lines.append(f"No blow-up in {steps} steps: no run's loss ({SMOOTH}-step mean) exceeded {BLOWUP}x its running "
                     "minimum "
                     f"(largest ratio {s[worst]['max_loss_ratio']:.2f}, {worst}).")
    else:
        lines.append("Blow-up: " + ", ".join(f"{n} at step {st}" for n, st in blown.items())
                     + ("" if REFERENCE in blown else f" ({REFERENCE}: none)") + ".")
    if others:
        lines.append("Update-error bias (mean over steps and attention weights; +1: updates always too large "
                     "in magnitude vs fp32 attention at the same weights): "
                     + ", ".join(f"{n} {s[n]['update_bias']:+.3f}" for n in others) + ".")
        lines.append("Gradient-error bias: " + ", ".join(f"{n} {s[n]['grad_bias']:+.3f}" for n in others)
                     + "; relative update error ||e||/||u||: "
                     + ", ".join(f"{n} {s[n]['update_rel']:.3g}" for n in others) + ".")
        lines.append(f"Accumulated update error after {steps} steps, coherence (1: random walk; "
                     f"{math.sqrt(steps):.0f}: one direction): "
                     + ", ".join(f"{n} {s[n]['coherence']:.2f}" for n in others)
                     + "; sigma_1/||.||_F of the sum: " + ", ".join(f"{n} {s[n]['lowrank']:.2f}" for n in others)
                     + ".")
    lines.append("Spectral-norm growth sigma(W_T)/sigma(W_0), largest over attention weights: "
                 + ", ".join(f"{n} x{v['sigma_growth_max']:.2f} ({v['sigma_growth_argmax']})" for n, v in s.items())
                 + (("; largest ratio to fp32's same weight at the end: "
                     + ", ".join(f"{n} {s[n]['sigma_vs_ref_max']:.3f}" for n in others)) if ref and others else "")
                 + ".")
    lines.append("Attention tile rows with more than one score within 1e-3 of the max (mean over logged steps, "
                 "the mechanism's precondition): " + ", ".join(f"{n} {100 * v['ties_tile']:.1f}%" for n, v in s.items())
                 + ".")
    lines.append("Final loss (mean of the last 10% of steps): "
                 + ", ".join(f"{n} {v['final_loss']:.4f}" for n, v in s.items()) + ".")
    return {"runs": s, "lines": lines}
