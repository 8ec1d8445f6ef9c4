"""What ``attnum diverge``'s curves say: per-seed ratios, their spread, and one sentence from the data.

For each seed the flash run's deviation from its baseline is divided by each proxy's -- at the last
checkpoint (levels, W1 and max |dW|) and as least-squares growth rates over the steps (slopes, as
the paper's Fig. 8 discusses rates of weight deviation). Over the seeds: median, min and max. A
proxy whose curve does not grow (a different init: its W1 is the init's, not training's) has no
rate to divide by, and the sentence says so instead of quoting a ratio.
"""

from __future__ import annotations

import math
import statistics

# The runs compared with the baseline run: flash itself and the two proxies that put its deviation in scale.
COMPARISONS = {"flash": "flash vs baseline", "seed": "different init seed", "lowprec": "low precision"}
PROXIES = {"seed": "different-init", "lowprec": "low-precision"}
METRICS = {"w1": "W1", "max_abs": "max|dW|"}
FLAT = 0.25  # a proxy whose level changes by less than this fraction over training is "flat"


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares growth rate dy/dstep."""
    n = len(xs)
    if n < 2:
        return math.nan
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(b) and math.isfinite(a) else math.nan


def growth(curve: dict, key: str) -> float:
    """Relative change of a curve over training: (last - first) / first (inf from a zero start)."""
    first, last = curve[key][0], curve[key][-1]
    return (last - first) / first if first else (math.inf if last else 0.0)


def headline(curves: dict[str, dict[str, list[float]]]) -> dict:
    """One seed: flash's deviation relative to each proxy at the last step, and of the growth rates."""
    f = curves["flash"]
    last = f["step"][-1]
    out: dict = {"step": last, "ratios": {}, "lines": [], "slopes": {}}
    for name in ("flash", *PROXIES):
        c = curves[name]
        out["slopes"][name] = {m: slope(c["step"], c[m]) for m in METRICS}
    for proxy, label in PROXIES.items():
        p = curves[proxy]
        r = {
            "w1": _ratio(f["w1"][-1], p["w1"][-1]),
            "max_abs": _ratio(f["max_abs"][-1], p["max_abs"][-1]),
            "w1_rate": _ratio(out["slopes"]["flash"]["w1"], out["slopes"][proxy]["w1"]),
            "max_abs_rate": _ratio(out["slopes"]["flash"]["max_abs"], out["slopes"][proxy]["max_abs"]),
            "proxy_growth": growth(p, "w1"),
        }
        out["ratios"][proxy] = r
        out["lines"].append(f"flash / {label} W1 at step {last}: {r['w1']:.3g}")
        out["lines"].append(f"flash / {label} max|dW| at step {last}: {r['max_abs']:.3g}")
        out["lines"].append(f"flash / {label} W1 growth rate: {r['w1_rate']:.3g}")
    return out


def spread(xs: list[float]) -> dict:
    """Median, min, max over the finite values; ``n`` counts them and ``nonfinite`` the rest (a ratio
    over a zero divergence, a NaN run), which are left out of the statistics but never out of sight."""
    ys = [x for x in xs if math.isfinite(x)]
    dropped = len(xs) - len(ys)
    if not ys:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0, "nonfinite": dropped}
    return {"median": statistics.median(ys), "min": min(ys), "max": max(ys), "n": len(ys), "nonfinite": dropped}


def summarise(per_seed: dict[int, dict]) -> dict:
    """Over seeds: spread of every ratio, the lines, and a sentence computed from the numbers."""
    first = next(iter(per_seed.values()))
    keys = list(next(iter(first["ratios"].values())))
    ratios = {p: {k: spread([h["ratios"][p][k] for h in per_seed.values()]) for k in keys} for p in PROXIES}
    out = {"step": first["step"], "seeds": list(per_seed), "ratios": ratios, "per_seed": per_seed}
    out["lines"] = [f"flash / {PROXIES[p]} {METRICS.get(k, k)} at step {out['step']}: {_fmt(ratios[p][k])}"
                    for p in PROXIES for k in ("w1", "max_abs")]
    out["lines"] += [f"flash / {PROXIES[p]} {METRICS[k[:-5]]} growth rate: {_fmt(ratios[p][k])}"
                     for p in PROXIES for k in ("w1_rate", "max_abs_rate")]
    out["sentence"] = sentence(out)
    return out


def _fmt(s: dict) -> str:
    bad = f"{s['nonfinite']} not finite" if s["nonfinite"] else ""
    if not s["n"]:
        return f"n/a ({bad})" if bad else "n/a"
    return f"{s['median']:.3g} (seeds: {s['min']:.3g}..{s['max']:.3g}, n={s['n']}{', ' + bad if bad else ''})"


def _side(s: dict) -> str:
    """How a ratio over seeds compares with 1, worded so that it does not flip on a difference the seeds
    themselves show: "exceeds"/"stays below" only when every seed is on that side of 1 *and* the
    median is further from 1 than half the seed spread ((max - min) / 2); otherwise "is within the
    seed spread of". (A median of 1.31 with seeds 1.13..1.87 is within the spread: another machine's
    1.03, seeds 0.87..1.55, says the same.)"""
    if not s["n"]:
        return "cannot be compared with"
    half = (s["max"] - s["min"]) / 2
    if s["max"] < 1 and 1 - s["median"] > half:
        return "stays below"
    if s["min"] > 1 and s["median"] - 1 > half:
        return "exceeds"
    return "is within the seed spread of"


def _quote(s: dict) -> str:
    if not s["n"]:
        return "n/a"
    if s["n"] == 1:
        return f"{s['median']:.2g}x, one seed"
    return f"{s['median']:.2g}x, seeds {s['min']:.2g}..{s['max']:.2g}"


def sentence(summary: dict) -> str:
    """The headline as one sentence, every word chosen by the numbers."""
    r = summary["ratios"]
    n = len(summary["seeds"])
    parts = []
    for metric, name in METRICS.items():
        sides = [f"{_side(r[p][metric])} the {PROXIES[p]} deviation ({_quote(r[p][metric])})" for p in PROXIES]
        parts.append(f"by {name} flash's deviation {' and '.join(sides)}")
    text = f"Over {n} seeds at step {summary['step']}, " + "; ".join(parts) + "."
    bad = sorted({f"{PROXIES[p]} {METRICS[m]}" for p in PROXIES for m in METRICS if r[p][m]["nonfinite"]})
    if bad:
        text += f" Some seeds' ratios are not finite and left out of the medians ({', '.join(bad)})."
    growth_low = r["lowprec"]["w1_rate"]
    if growth_low["n"]:
        text += (f" Flash's W1 grows {growth_low['median']:.2g}x as fast as low precision's "
                 f"({growth_low['min']:.2g}..{growth_low['max']:.2g}).")
    flat = r["seed"]["proxy_growth"]
    if flat["n"] and abs(flat["median"]) < FLAT:
        text += (f" The different-init W1 changes by {100 * flat['median']:+.0f}% over training: it measures the "
                 "init, not training, so its growth rate is no yardstick.")
    return text
