"""The low-bit family in the registry: kind ``lowbit`` (one scheme on one input), its findings (the
SageAttention orderings judged on stored rows), its report section, and the ``lowbit`` profile."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from attnum.studies.lowbit.point import LOWBIT_FIELDS, LowbitPoint
from attnum.sweep.registry import Family, Finding, ReportContext, ReportPart, StudyKind

GRANS = ("tensor", "block", "warp", "thread", "token")
SMOOTHING = {(False, False): "no smoothing", (True, False): "smooth K", (False, True): "smooth Q",
             (True, True): "smooth Q+K"}


def _run(point: LowbitPoint, kernels: tuple[str, ...]) -> dict[str, Any]:
    return point.run()


def _mine(rows):
    return [r for r in rows if r.get("config", {}).get("kind") == "lowbit" and r.get("status") == "done"]


def _err(r) -> float:
    return 1.0 - r["metrics"]["cossim"]


def _resolved(r) -> tuple[str, bool, bool]:
    """(granularity, smooth_k, smooth_q) of a row's policy (unset axes take the scheme's values)."""
    lb = LowbitPoint(**r["config"]).policy().lowbit
    return (lb.granularity, lb.smooth_k, lb.smooth_q) if lb is not None else ("-", False, False)


def findings(rows) -> list[Finding]:
    """Per input: does smoothing (Q+K, then K) and finer granularity lower 1 - CosSim, as SageAttention2's
    Tables 4 and 6 say? Judged on the stored lowbit rows that vary only those axes."""
    mine = [r for r in _mine(rows) if LowbitPoint(**r["config"]).policy().lowbit is not None]
    out = []
    groups: dict[tuple, dict] = defaultdict(dict)
    for r in mine:
        g, sk, sq = _resolved(r)
        c = r["config"]
        groups[(c["dist"], c["scheme"], c["format"], g)][(sk, sq)] = _err(r)
    for (dist, scheme, fmt, g), errs in sorted(groups.items()):
        if (False, False) not in errs or (True, True) not in errs:
            continue
        ok = errs[(True, True)] <= errs[(False, False)]
        out.append(Finding(claim_id="lowbit-smoothing", figure="lowbit_granularity", policy=f"{scheme}:{fmt}",
                           variant=f"{dist}/{g}", claim="smoothing Q and K lowers the error (SageAttention2 Table 4)",
                           verdict="holds" if ok else "does not hold",
                           measured=f"1-CosSim {errs[(False, False)]:.2e} -> {errs[(True, True)]:.2e}",
                           numbers={SMOOTHING[k]: v for k, v in errs.items()}))
    return out


def report(ctx: ReportContext) -> ReportPart:
    mine = _mine(ctx.rows)
    if not mine:
        return ReportPart()
    from attnum.report import plotting
    from attnum.report.blocks import figure

    figs, caps, sections = {}, {}, []
    lb_rows = [r for r in mine if LowbitPoint(**r["config"]).policy().lowbit is not None]
    if lb_rows:
        dists = sorted({r["config"]["dist"] for r in lb_rows})
        fig, axes = plotting.panels(len(dists), title="Low-bit attention: error against granularity and smoothing")
        for ax, dist in zip(axes[0], dists):
            lines: dict[str, dict[str, float]] = defaultdict(dict)
            for r in lb_rows:
                if r["config"]["dist"] == dist:
                    g, sk, sq = _resolved(r)
                    lines[f"{r['config']['scheme']} {SMOOTHING[(sk, sq)]}"][g] = _err(r)
            for label, pts in sorted(lines.items()):
                xs = [g for g in GRANS if g in pts and pts[g] > 0]
                ax.plot(xs, [pts[g] for g in xs], marker="o", label=label)
            plotting.log_y(ax)
            plotting.finish(ax, xlabel="scale granularity", ylabel="1 - CosSim vs float64", title=f"inputs {dist}")
        figs["lowbit_granularity"] = plotting.save(fig, ctx.figures_dir, "lowbit_granularity")
        caps["lowbit_granularity"] = ("1 - CosSim of the output against float64, per Q/K scale granularity, one "
                                      "line per scheme and smoothing; one panel per input distribution.")
    fa = [r for r in mine if LowbitPoint(**r["config"]).policy().lowbit is None]
    if fa:
        fig, axes = plotting.panels(1, title="FlashAttention-4 lazy rescaling: error against threshold")
        ax = axes[0][0]
        lines = defaultdict(dict)
        for r in fa:
            c = r["config"]
            t = LowbitPoint(**c).policy().rescale_threshold
            lines[f"{c['scheme']}:{c['format']} {c['dist']} N={c['seq_len']}"][t or 0.0] = r["metrics"]["rmse"]
        for label, pts in sorted(lines.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", label=label)
        plotting.log_y(ax)
        plotting.finish(ax, xlabel="rescale threshold (log2 units; 0 = rescale every tile)", ylabel="RMSE vs float64")
        figs["lowbit_rescale"] = plotting.save(fig, ctx.figures_dir, "lowbit_rescale")
        caps["lowbit_rescale"] = "RMSE against float64 as FA4's rescale threshold grows (0: FA2's rescale every tile)."
    body = "".join(figure(name, paths[0], caps) for name, paths in figs.items())
    sections.append(f"<section><h2>Low-bit attention</h2>{body}</section>")
    return ReportPart(figures=figs, captions=caps, sections=tuple(sections), placed=frozenset(figs))


def _profile(profile: str, device: str):
    """``attnum reproduce --profile lowbit``: INT4 Q K (SageAttention2's setting) on the channel-bias and
    sink inputs over granularity x smoothing, and FA2 vs FA4's lazy rescale over thresholds."""
    from attnum.sweep.spec import Group, SweepSpec

    base = {"format": "fp16", "seq_len": 512, "device": device}
    gran = tuple(LowbitPoint(scheme="sage2-4b", pv="fp16", pv_acc="fp32", dist=d, granularity=g, smooth_k=sk,
                             smooth_q=sq, **base)
                 for d in ("kbias", "sink") for g in GRANS for sk in (False, True) for sq in (False, True))
    resc = tuple(LowbitPoint(scheme="fa2", format="bf16", dist=d, seq_len=512, head_dim=128, rescale_threshold=t,
                             device=device) for d in ("normal", "sink") for t in (None, 1.0, 4.0, 8.0, 16.0))
    return SweepSpec(name=profile, description="Low-bit attention: SageAttention's granularity and smoothing; "
                     "FA4's lazy rescaling", record=(), kernels=(),
                     groups=(Group(name="lowbit-granularity", points=gran), Group(name="lowbit-rescale", points=resc)),
                     source=f"attnum reproduce --profile {profile}")


FAMILY = Family(
    name="lowbit",
    order=7,
    kinds=(StudyKind(name="lowbit", point_type=LowbitPoint, run=_run, axes=LOWBIT_FIELDS, metrics=(
        ("cossim", "CosSim vs float64"), ("rel_l1", "relative L1 vs float64"), ("rmse", "RMSE vs float64"))),),
    findings=findings,
    report=report,
    profiles={"lowbit": _profile},
)
