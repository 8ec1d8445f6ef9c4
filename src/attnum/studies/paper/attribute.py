"""An error budget per rounding site: which site makes flash (or the baseline) deviate, for one config.

For every site of the policy, two runs against the same float64 golden value and the same inputs:

- ``only``: only this site rounds to the policy's format, every other site is exact;
- ``without``: only this site is exact, every other site rounds as the policy says.

``full`` is the policy itself and ``floor`` the run where no site rounds. "Exact" means the
*carrier's* format (float32 for a policy that fits in fp32 with native fp32 matmuls, else float64):
holding one site in float64 would move the whole computation to a float64 carrier and turn the
native fp32 matmuls into emulated ones, changing two things at once. The floor -- the carrier's own
arithmetic: its matmuls and element-wise ops -- is reported, so a reader sees what "exact" leaves.

Sites not attributed: ``inputs`` (rounded once before the golden value is computed, so golden, flash
and baseline share them and they contribute nothing by construction) and ``lse`` (not part of the
forward output). ``matmul_acc`` is attributed when the policy emulates a narrower accumulator.
A site already at the carrier's format rounds nothing: its ``only`` run is the floor and its
``without`` run the full policy, reused rather than rerun.
"""

from __future__ import annotations

import dataclasses
import time

from attnum.attention import baseline_attention, flash_attention, golden_attention
from attnum.errors import bad_value
from attnum.numerics.formats import PRESETS, FloatFormat
from attnum.numerics.metrics import deviation
from attnum.numerics.policy import Policy
from attnum.studies.paper.compare import CompareConfig, compare_inputs, require_finite_golden

ATTRIBUTED = ("scores", "exp", "probs", "row_sum", "rescale", "acc", "out")
NOT_ATTRIBUTED = {
    "inputs": "rounded once before golden, flash and baseline see them: contributes nothing by construction",
    "lse": "not part of the forward output",
}
METRICS = ("mean_abs", "max_abs", "rmse", "rel_mean_abs")
IMPLS = ("flash", "baseline")
UNUSED = {"baseline": ("rescale",)}  # the baseline has no online-softmax correction
_FP32, _FP64 = PRESETS["fp32"], PRESETS["fp64"]


def exact_format(policy: Policy) -> FloatFormat:
    """The format an "exact" site holds: the policy's carrier (see the module docstring)."""
    return _FP32 if policy.carrier.itemsize == 4 else _FP64


def site_format(policy: Policy, site: str) -> FloatFormat | None:
    return policy.matmul_acc if site == "matmul_acc" else getattr(policy, site)


def sites_of(policy: Policy) -> tuple[str, ...]:
    """The sites attributed for ``policy``: ATTRIBUTED, plus matmul_acc when it is emulated."""
    return ATTRIBUTED + (("matmul_acc",) if policy.matmul_mode == "emulated" else ())


def rounds(policy: Policy, site: str) -> bool:
    """Whether ``site`` rounds anything beyond the carrier under ``policy``."""
    if site == "matmul_acc":
        return policy.matmul_mode == "emulated"
    return not exact_format(policy).fits_in(getattr(policy, site))


def _exact_site(site: str, exact: FloatFormat) -> dict:
    return {"matmul_acc": None} if site == "matmul_acc" else {site: exact}


def floor_policy(policy: Policy) -> Policy:
    """``policy`` with every attributed site exact (inputs, normalisation and lse kept)."""
    exact = exact_format(policy)
    over: dict = {s: exact for s in ATTRIBUTED}
    if policy.matmul_mode == "emulated":
        over["matmul_acc"] = None
    return policy.with_overrides(**over)


def only_policy(policy: Policy, site: str) -> Policy:
    """Only ``site`` rounds as in ``policy``; every other attributed site is exact."""
    restore = {"matmul_acc": policy.matmul_acc, "reduction_chunk": policy.reduction_chunk} if site == "matmul_acc" \
        else {site: getattr(policy, site)}
    return floor_policy(policy).with_overrides(**restore)


def without_policy(policy: Policy, site: str) -> Policy:
    """``policy`` with only ``site`` exact."""
    return policy.with_overrides(**_exact_site(site, exact_format(policy)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttributeConfig:
    """One configuration (a :class:`CompareConfig`) and the metric that ranks the sites."""

    compare: CompareConfig
    metric: str = "mean_abs"

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise bad_value("metric", self.metric, f"one of {METRICS}")


def run_attribute(cfg: CompareConfig | AttributeConfig) -> dict:
    """The error budget of one config -> {"config", "policy", "baseline_policy", "tiles", "carrier",
    "metric", "full", "floor", "sites": {site: {"format", "rounds", "only", "without"}}, "dominant",
    "timing_s"}; each run is {"flash": deviation, "baseline": deviation} against the float64 golden."""
    acfg = cfg if isinstance(cfg, AttributeConfig) else AttributeConfig(compare=cfg)
    c = acfg.compare
    from attnum.sweep.memory_budget import require_compare

    require_compare(c, what="attribute")
    t0 = time.perf_counter()
    policy, (q, k, v) = compare_inputs(c)
    base_policy = c.policies()[1]
    tiles = c.tiles()
    common = dict(is_causal=c.causal, causal_alignment=c.causal_alignment)
    golden = golden_attention(q, k, v, **common)
    require_finite_golden(golden, c)

    def run(flash_pol: Policy, base_pol: Policy) -> dict:
        flash = flash_attention(q, k, v, policy=flash_pol, block_q=tiles.Br, block_k=tiles.Bc, variant=c.variant,
                                kv_order=c.kv_order, **common)
        base = baseline_attention(q, k, v, policy=base_pol, **common)
        return {"flash": deviation(flash, golden, fmt=policy.out),
                "baseline": deviation(base, golden, fmt=base_policy.out)}

    full = run(policy, base_policy)
    floor = run(floor_policy(policy), floor_policy(base_policy))
    sites = {}
    for site in dict.fromkeys(sites_of(policy) + sites_of(base_policy)):
        active = {name: site in sites_of(p) and site not in UNUSED.get(name, ()) and rounds(p, site)
                  for name, p in (("flash", policy), ("baseline", base_policy))}
        if any(active.values()):
            only = run(only_policy(policy, site) if active["flash"] else floor_policy(policy),
                       only_policy(base_policy, site) if active["baseline"] else floor_policy(base_policy))
            without = run(without_policy(policy, site) if active["flash"] else policy,
                          without_policy(base_policy, site) if active["baseline"] else base_policy)
        else:
            only, without = floor, full
        fmt = site_format(policy, site)
        sites[site] = {"format": fmt.name if fmt is not None else "exact", "rounds": any(active.values()),
                       "rounds_in": [name for name, on in active.items() if on], "only": only, "without": without}
    return {
        "config": c.to_dict(),
        "policy": policy.name,
        "baseline_policy": base_policy.name,
        "tiles": {"Br": tiles.Br, "Bc": tiles.Bc, "Tc": tiles.Tc(c.input_spec().S), "area": tiles.area},
        "carrier": exact_format(policy).name,
        "metric": acfg.metric,
        "not_attributed": NOT_ATTRIBUTED,
        "full": full,
        "floor": floor,
        "sites": sites,
        "dominant": dominant(full, sites, acfg.metric),
        "timing_s": time.perf_counter() - t0,
    }


def dominant(full: dict, sites: dict, metric: str) -> dict:
    """Per implementation, the site whose rounding alone deviates most (``site``), what share of the
    full deviation it gives alone (``alone``) and what is left when only it is exact (``left``);
    ``excess``: the site whose rounding alone makes flash deviate most beyond the baseline."""
    out: dict = {"metric": metric}
    for impl in IMPLS:
        ranked = sorted((s for s, r in sites.items() if impl in r["rounds_in"]),
                        key=lambda s: -sites[s]["only"][impl][metric])
        total = full[impl][metric]
        if not ranked or not total:
            out[impl] = None
            continue
        top = ranked[0]
        out[impl] = {"site": top, "alone": sites[top]["only"][impl][metric] / total,
                     "left": sites[top]["without"][impl][metric] / total}
    gaps = {s: r["only"]["flash"][metric] - r["only"]["baseline"][metric] for s, r in sites.items() if r["rounds"]}
    top = max(gaps, key=gaps.get) if gaps else None
    out["excess"] = None if top is None or gaps[top] <= 0 else {
        "site": top, "ratio": _ratio(sites[top]["only"]["flash"][metric], sites[top]["only"]["baseline"][metric])}
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def budget_rows(result: dict, metric: str | None = None) -> list[dict]:
    """The budget as table rows: one per site (then full and floor), flash and baseline columns."""
    metric = metric or result["metric"]
    rows = []
    for site, r in result["sites"].items():
        rows.append({"site": site, "format": r["format"], "rounds": r["rounds"],
                     "rounds_in": tuple(r.get("rounds_in", IMPLS)),
                     **{f"only_{i}": r["only"][i][metric] for i in IMPLS},
                     **{f"without_{i}": r["without"][i][metric] for i in IMPLS}})
    for name in ("full", "floor"):
        rows.append({"site": name, "format": "", "rounds": True, "rounds_in": IMPLS,
                     **{f"only_{i}": result[name][i][metric] for i in IMPLS},
                     **{f"without_{i}": result[name][i][metric] for i in IMPLS}})
    return rows


def ratio_text(row: dict) -> str:
    """flash/baseline for a budget row, or why there is none: a site that rounds in one
    implementation only is compared with the other's floor, which is no ratio of like with like."""
    have = set(row.get("rounds_in", IMPLS))
    if row["site"] not in ("full", "floor") and row.get("rounds") and have != set(IMPLS):
        missing = next(i for i in IMPLS if i not in have)
        if row["site"] in UNUSED.get(missing, ()):
            return f"n/a ({missing} has no such site)"
        return f"n/a ({missing} does not round here)"
    if not row["only_baseline"]:
        return "n/a (baseline error is 0)"
    return f"{row['only_flash'] / row['only_baseline']:.3g}x"


def dominant_sentence(result: dict) -> str:
    """"dominant site: row_sum (alone 0.93 of flash's mean_abs; exact: 0.11 left)" from the data."""
    d = result["dominant"]
    f = d.get("flash")
    if not f:
        return "dominant site: none (no site rounds beyond the carrier)"
    text = (f"dominant site: {f['site']} (alone {f['alone']:.2f} of flash's {d['metric']}, "
            f"{f['left']:.2f} left when only it is exact)")
    b = d.get("baseline")
    if b:
        text += f"; baseline: {b['site']} ({b['alone']:.2f})"
    if d.get("excess") and d["excess"]["site"] != f["site"]:
        text += f"; flash's excess over the baseline: {d['excess']['site']}"
    return text
