"""The report's first paragraph: what the paper reproduction found, in a few sentences from the data.

Built from the Fig. 4 claim map (:func:`attnum.studies.paper.report.findings.compute_maps`, claim ``ten_x``):
each cell is one configuration (N, Bc, policy, variant, distribution, ...) with the median per-seed
ratio of flash's to the baseline's max error against the fp64 golden, the number of KV tiles a row is
summed over (Tc = S / Bc), the magnitude bias and, where an attribute point ran there, the dominant
rounding site. Every number and every word that depends on a number comes from those cells: where
the excess is (the policies and the Tc from which every cell reaches the "about 10x" band's lower
edge), how large (the largest median ratio and where), which site dominates, and what the policy of
real FlashAttention-2/3 kernels (``fa2``, variant ``fa2``: fp32 statistics, one final normalisation)
shows. No cell tested: no headline.
"""

from __future__ import annotations

import math
from typing import Any

SITE_WORDS = {
    "row_sum": "the running sum l",
    "acc": "the output accumulator O",
    "rescale": "the rescale factor exp(m_old - m_new)",
    "exp": "the exponentials P = exp(S - m)",
    "scores": "the scores S",
    "probs": "P as fed to the P·V matmul",
    "out": "the output",
    "matmul_acc": "the matmul accumulator",
}
REAL = ("fa2", "fa2")  # (policy, variant) of FlashAttention-2/3 kernels: fp32 statistics, normalise once

# The terms the headline uses, for a reader who has not read the paper: the report's glossary line and
# the hover text (<abbr title=...>) of each term's first use.
GLOSSARY = {
    "baseline": "standard attention (scores, softmax, P·V materialised) at the same precision",
    "golden": "exact attention, computed in float64",
    "policy": "where a kernel rounds, and to what: uniform = every step in bf16 (the paper's re-implementation); "
              "fa2 = fp32 scores, running sum and accumulator, as FlashAttention-2/3 kernels do",
    "variant": "the loop: fa1 normalises and rounds the output after every KV tile; fa2 divides once at the end",
    "N": "sequence length (queries = keys)",
    "Bc": "KV tile size: keys processed per step of the loop",
    "Tc": "number of KV tiles a query row is summed over, S/Bc",
    "site": "one place where a kernel rounds (row_sum = the running softmax sum l; probs = P as fed to P·V; ...)",
}


def _coords_text(c: Any, keys: tuple[str, ...] = ("policy", "variant", "seq_len", "Bc", "dist")) -> str:
    names = {"seq_len": "N"}
    parts = [f"{names.get(k, k)} = {c.coords[k]}" for k in keys if k in c.coords]
    if "Tc" in c.numbers:
        parts.append(f"Tc = {c.numbers['Tc']}")
    return ", ".join(parts)


def paper_headline(maps: list) -> list[str]:
    """The headline's sentences (empty when Fig. 4 has no tested cell); see the module docstring."""
    from attnum.studies.paper.report.findings import HEADLINE_FORMAT, TEN_X_BAND

    ten = next((m for m in maps if m.claim_id == "ten_x"), None)
    cells = [c for c in (ten.cells if ten else ()) if c.verdict != "not tested" and math.isfinite(c.value)]
    if not cells:
        return []
    lo = TEN_X_BAND[0]
    top = max(cells, key=lambda c: c.value)
    hot = [c for c in cells if c.value >= lo]
    out = []
    if not hot:
        out.append(f"Nowhere in this grid does flash attention's error at {HEADLINE_FORMAT} reach {lo:.2g}x the "
                   f"baseline's (max error against the fp64 golden, median over seeds): the largest ratio is "
                   f"{top.value:.3g}x ({_coords_text(top)}), so the paper's \"about 10x\" is not reproduced here.")
    else:
        combos = sorted({_combo(c) for c in hot})
        text = (f"At {HEADLINE_FORMAT}, flash attention's max error against the fp64 golden reaches {top.value:.3g}x "
                f"the baseline's ({_coords_text(top)}; median over seeds), but only in {len(hot)} of {len(cells)} "
                f"configurations, all with policy / variant {', '.join(' / '.join(x) for x in combos)}")
        tcs = [c for c in cells if "Tc" in c.numbers and _combo(c) in combos]
        if tcs:
            text += _tc_clause(tcs, lo)
        out.append(text + ".")
        site = _site(hot, top)
        if site:
            name, alone, where = site
            bias = top.numbers.get("bias_flash")
            sentence = (f"The error budget puts it in {SITE_WORDS.get(name, name)} (site {name}, in "
                        f"{HEADLINE_FORMAT}): rounding it alone gives {alone} of flash's error ({where})")
            if bias is not None and math.isfinite(bias):
                sign = "too large" if bias > 0 else "too small"
                sentence += (f"; the error is one-sided, magnitude bias {bias:+.2f} (|O| comes out {sign})"
                             if abs(bias) >= 0.5 else f"; magnitude bias {bias:+.2f}")
            out.append(sentence + ".")
    real = [c for c in cells if _combo(c) == REAL and not c.coords.get("baseline_policy")]
    if real:
        r_lo, r_hi = min(c.value for c in real), max(c.value for c in real)
        verdict = ("so kernels built like FlashAttention-2/3 do not show the excess" if r_hi < lo else
                   f"so the excess is not only a property of bf16 statistics ({sum(c.value >= lo for c in real)} "
                   "cells reach it)")
        eager = [c for c in cells if _combo(c) == REAL and c.coords.get("baseline_policy")]
        also = ""
        if eager:
            e_lo, e_hi = min(c.value for c in eager), max(c.value for c in eager)
            also = (f" (against {eager[0].coords['baseline_policy']} as the baseline: {e_lo:.2g}..{e_hi:.2g}x over "
                    f"{len(eager)})")
        out.append(f"Under the policy of real FlashAttention-2/3 kernels (fa2 / fa2: fp32 scores, running sum and "
                    f"accumulator, one final normalisation) the ratio is {r_lo:.2g}..{r_hi:.2g}x over {len(real)} "
                    f"configurations{also}, {verdict}.")
    return out


def paper_in_short(maps: list) -> str:
    """One plain sentence for someone who has not read the paper ("In short: ..."), from the same cells
    as :func:`paper_headline`; "" when Fig. 4 has no tested cell."""
    from attnum.studies.paper.report.findings import HEADLINE_FORMAT, TEN_X_BAND

    ten = next((m for m in maps if m.claim_id == "ten_x"), None)
    cells = [c for c in (ten.cells if ten else ()) if c.verdict != "not tested" and math.isfinite(c.value)]
    if not cells:
        return ""
    lo = TEN_X_BAND[0]
    top = max(cells, key=lambda c: c.value)
    hot = [c for c in cells if c.value >= lo]
    if not hot:
        return (f"In short: nowhere in this grid is flash attention's error at {HEADLINE_FORMAT} {lo:.2g}x or more "
                f"that of standard attention at the same precision (the largest ratio is {top.value:.3g}x), so the "
                "paper's \"about 10x\" is not reproduced here.")
    reasons = []
    for policy, variant in sorted({_combo(c) for c in hot}, key=lambda pv: (pv[0] != "uniform", pv)):
        if policy == "uniform":
            why = f"keeps its softmax statistics in {HEADLINE_FORMAT} (policy uniform)"
        elif variant == "fa1":
            why = "rounds its output at every tile (variant fa1)"
        else:
            why = f"computes as policy {policy} / variant {variant}"
        if why not in reasons:
            reasons.append(why)
    text = (f"In short: at {HEADLINE_FORMAT}, flash attention's error is up to {top.value:.2g}x that of standard "
            f"attention at the same precision, but only where a kernel {' or '.join(reasons)}")
    tcs = [c for c in cells if "Tc" in c.numbers and _combo(c) in {_combo(h) for h in hot}]
    above, _below = _tc_edges(tcs, lo) if tcs else (None, None)
    if above is not None:
        text += f", and only with many KV tiles per row (Tc = S/Bc >= {above})"
    real = [c for c in cells if _combo(c) == REAL and not c.coords.get("baseline_policy")]
    if real and max(c.value for c in real) < lo:
        text += (f"; kernels that compute like FlashAttention-2/3 (fp32 statistics, one final normalisation) stay at "
                 f"standard attention's error ({min(c.value for c in real):.2g}..{max(c.value for c in real):.2g}x)")
    elif real:
        text += "; kernels that compute like FlashAttention-2/3 reach it too in some configurations"
    return text + "."


def _combo(c: Any) -> tuple[str, str]:
    return str(c.coords.get("policy")), str(c.coords.get("variant", "fa2"))


def _tc_clause(cells: list, lo: float) -> str:
    """", growing with the KV tiles per row: >= lo in every such cell with Tc >= T (below it at Tc <= t)"."""
    above, below = _tc_edges(cells, lo)
    if above is None:
        return (f", and not in every configuration with many KV tiles per row (Tc = S/Bc up to "
                f"{max(c.numbers['Tc'] for c in cells)})")
    text = (f", growing with the number of KV tiles a row is summed over: >= {lo:.2g}x in every one with "
            f"Tc = S/Bc >= {above}")
    if below is not None:
        text += f" and below it in every one with Tc <= {below}"
    return text


def _tc_edges(cells: list, lo: float) -> tuple[Any, Any]:
    """(the least Tc from which every cell reaches ``lo``, the largest Tc up to which none does); None
    where there is none."""
    tcs = sorted({c.numbers["Tc"] for c in cells})
    above = [t for t in tcs if all(c.value >= lo for c in cells if c.numbers["Tc"] >= t)]
    below = [t for t in tcs if all(c.value < lo for c in cells if c.numbers["Tc"] <= t)]
    return (above[0] if above else None), (below[-1] if below else None)


def _site(hot: list, top: Any) -> tuple[str, str, str] | None:
    """(site, "0.93", where) of the hot cell nearest the top that an attribute point covered."""
    for c in sorted(hot, key=lambda c: -c.value):
        text = c.numbers.get("dominant_site")
        if text:
            name = text.split(" ", 1)[0]
            alone = text.split("alone ", 1)[1].split(" ", 1)[0] if "alone " in text else "?"
            return name, alone, _coords_text(c, ("policy", "variant", "seq_len", "Bc"))
    return None
