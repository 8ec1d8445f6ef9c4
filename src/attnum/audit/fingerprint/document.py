"""The fingerprint's JSON document: what was found, how to reproduce it, what stays undetermined.

Where a site, the merge, the structure or the architecture is undetermined (several candidates reproduce
every call), ``undetermined`` lists each such choice with its alternatives, and ``reproduction`` says that
it picks one of them (:func:`reproduction`); ``resolve`` says how to tell them apart (``--resolve``: more
calls of the target at other seeds and magnitudes, :mod:`attnum.audit.fingerprint.resolve`).
"""

from __future__ import annotations

from attnum.audit.fingerprint.families import EagerOps, Untiled
from attnum.audit.fingerprint.search import Candidate, policy_spec, site_table
from attnum.kernels.triton.dot_flash import DotFlash
from attnum.kernels.triton.sum_decode import SumDecode

UNEXPLAINED = ("no candidate explains it: no (tile, split, merge, arithmetic) of the search reproduces the probes "
               "and the fitting inputs bit for bit")


def accumulation(c: Candidate) -> str:
    """How the candidate's tiles reach O, in words."""
    p = c.policy
    if isinstance(p, Untiled):
        return "un-tiled: softmax over all the keys, then one P V matmul"
    if isinstance(p, EagerOps):
        return (f"un-tiled: torch's {'eager ops in the input dtype' if p.path == 'eager' else 'SDPA math path'}, "
                "P V one GEMM of the CPU library's")
    if isinstance(p, SumDecode):
        return "element-wise tl.sum per tile, added to O in fp32 (Triton decode)"
    if isinstance(p, DotFlash):
        return f"in the MMA: O is tl.dot's accumulator ({p.arch}'s instructions)"
    if p.mma is not None:
        if p.acc.name == "fp32" and p.mma_chain:
            return f"in the MMA: O is the P V instructions' accumulator ({p.mma}'s)"
        return f"each tile's P V from zero on {p.mma}'s MMA, then added to O at acc ({p.acc.name})"
    return "each tile's P V a CPU matmul, then added to O at acc (" + p.acc.name + ")"


def reproduction(best: Candidate, spec: str, lengths) -> str:
    p = best.policy
    if isinstance(p, Untiled):
        return f"attnum.attention.baseline.baseline_attention(q, k, v, policy={policy_spec(p.policy)!r})"
    if isinstance(p, EagerOps):
        fn = "eager_attention" if p.path == "eager" else "sdpa_math_attention"
        return f"attnum.attention.eager.{fn}(q, k, v)  (torch's own ops, on this CPU)"
    if isinstance(p, SumDecode):
        return (f"attnum.kernels.triton.sum_decode.sum_decode(q, k, v, bounds=split_bounds[S], "
                f"block_k={best.block_k}, fused={p.fused})")
    if isinstance(p, DotFlash):
        return (f"attnum.kernels.triton.dot_flash.dot_flash(q, k, v, block_n={best.block_k}, arch={p.arch!r}, "
                f"fused={p.fused})")
    if all(len(best.bounds[S]) == 1 for S in lengths):
        return (f"attnum.flash_attention(q, k, v, policy={spec!r}, block_k={best.block_k}, "
                f"kv_order={best.order!r})")
    return (f"attnum.attention.serving.decode.decode_attention(q, k, v, is_causal=False, policy={spec!r}, "
            f"split_rule=SplitPlan(bounds, {best.block_k}, {best.merge!r}, kv_order={best.order!r})) "
            "with bounds from split_bounds")


def undetermined(found: list[Candidate], best: Candidate, sites: dict, lengths) -> list[dict]:
    """[{choice, answer, alternatives}] for every choice the candidates that reproduce disagree on."""
    out = []
    for site, row in sites.items():
        if not row["determined"]:
            out.append({"choice": f"site {site}", "answer": row["format"], "alternatives": row["alternatives"]})
    same = [c for c in found if (c.bounds, c.block_k, c.order) == (best.bounds, best.block_k, best.order)]
    merges = sorted({c.merge for c in same if c.merge})
    if len(merges) > 1:
        out.append({"choice": "merge", "answer": best.merge, "alternatives": merges})
    shapes = {(c.block_k, c.order, tuple(sorted(c.bounds.items()))) for c in found}
    if len(shapes) > 1:
        out.append({"choice": "structure", "answer": f"Bc={best.block_k} {best.order}, "
                    + ", ".join(f"S={S}: {len(best.bounds[S])} split(s)" for S in lengths),
                    "alternatives": len(shapes)})
    return out


def explained(found: list[Candidate], best: Candidate, lengths, *, heads: int, d: int) -> dict:
    from attnum.audit.fingerprint.rules import matching_cuts, matching_rules

    untiled = isinstance(best.policy, (Untiled, EagerOps))
    same = [c for c in found if (c.bounds, c.block_k, c.order) == (best.bounds, best.block_k, best.order)]
    merges = sorted({c.merge for c in same if c.merge})
    structures = {(c.block_k, c.order, tuple(sorted(c.bounds.items()))) for c in found}
    others = []
    for c in found:
        alt = {"kv_block": c.block_k, "kv_order": c.order,
               "split_bounds": {str(S): [list(r) for r in c.bounds[S]] for S in lengths}}
        if (c.bounds, c.block_k, c.order) != (best.bounds, best.block_k, best.order) and alt not in others:
            others.append(alt)
    spec = policy_spec(best.policy)
    sites = site_table([best] + [c for c in found if c is not best])
    und = undetermined(found, best, sites, lengths)
    rep = reproduction(best, spec, lengths)
    if und:
        rep += ("  [picks one of the choices that reproduce every call equally: " + "; ".join(
            f"{u['choice']} {u['answer']}" for u in und) + " (see undetermined)]")
    return {
        "kv_block": None if untiled else best.block_k,
        "kv_order": None if untiled else best.order,
        "tiling": "un-tiled" if untiled else "tiled",
        "accumulation": accumulation(best),
        "structure_determined": len(structures) == 1,
        "splits": {str(S): len(best.bounds[S]) for S in lengths},
        "split_bounds": {str(S): [list(r) for r in best.bounds[S]] for S in lengths},
        "structure_alternatives": others,
        "split_rules": [] if untiled else matching_rules(best.bounds, best.block_k, best.order, heads=heads, d=d),
        "split_cuts": matching_cuts(best.bounds),
        "merge": (merges[0] if len(merges) == 1 else {"undetermined": merges}) if merges else "none (one split)",
        "sites": sites,
        "policy": spec,
        "candidates": len(found),
        "tile_arithmetic": (best.policy.describe() if isinstance(best.policy, (SumDecode, DotFlash))
                            else "softmax, then one matmul (attnum's baseline emulation, or torch's own ops)" if untiled
                            else "matmul per tile (attnum's flash / decode emulation)"),
        "reproduction": rep,
        "undetermined": und,
    }


def unexplained(ranked, lengths) -> dict:
    """No candidate reproduces the target: the best-ranked structure is reported as such, never as a match."""
    out = {"kv_block": None, "kv_order": None, "splits": None, "merge": None, "sites": None, "policy": None,
           "bit_exact_fraction": None, "residual_ulp": None, "undetermined": [], "unexplained": UNEXPLAINED}
    if ranked:
        top = ranked[0]
        out["closest_structure"] = {str(S): {"kv_block": top[S].block_k, "span": top[S].span,
                                             "order": top[S].order, "mma_group": top[S].group or None,
                                             "chained": top[S].chain, "unknown_probes": top[S].unknown}
                                    for S in lengths}
    return out
