"""``fingerprint(target)``: which arithmetic a black-box attention kernel implements, from its outputs.

Shape alphabet: B = 1 batch, H heads (``heads``), N = 1 query, S keys (each of ``lengths``), d = dv head dim.

The steps (docs/fingerprint.md):

1. swamping probes at each length (:func:`probes.swamp_columns`): the structures (Bc, split span,
   walk order) consistent with which e survived (:mod:`structure`);
2. for the best-ranked (Bc, order), the split probes (:func:`probes.boundary_columns`) give the split
   starts at each length;
3. fitting inputs (:func:`probes.random_inputs`); every (structure, merge, policy) of the search
   (:mod:`search`: attnum's policies, then the element-wise Triton decode family) replayed through
   attnum's emulation and kept when it reproduces both the fitting calls and the probe calls bit for bit;
4. the reproduction checked on fresh random inputs: the fraction of bit-identical output elements.

Every call of the target goes through one :class:`probes.CountedTarget`: ``calls`` counts them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from attnum.audit.fingerprint import probes, search, structure
from attnum.errors import bad_value
from attnum.kernels.triton.sum_decode import SumDecode
from attnum.numerics.threads import one_thread

MERGES = ("lse", "online", "ratio")
DEFAULT_LENGTHS = (512, 1200)
TOP_STRUCTURES = 4  # (Bc, order) pairs confirmed by replay, best ranked first
PROPOSED = 12  # (Bc, order) pairs of the probes' ranking re-ranked by a first replay
NO_MATMUL = ("not identified: no matmul callable given (an attention call's outputs do not isolate its matrix "
             "unit; pass one to name an attnum.numerics.mma.dense architecture)")


def _bounds_options(t: probes.CountedTarget, S: int, bc: int, order: str, ranked, per_length, *, heads, d,
                    dtype, calls) -> list[tuple]:
    """Split ranges at S for one (Bc, order): the split probes' answer, the tied spans of the swamping
    ranking, each with the first or the last tile start added or both (boundaries the split probes
    cannot see: they need two tiles in one split), and every tile a split of its own; only cuts of
    equal splits with a shorter last one (those of every rule in :mod:`attnum.attention.serving.split_rules`)."""
    starts, cols = probes.boundary_columns(S, bc, order)
    opts = []
    if len(starts):
        surv, rec = probes.run_swamp(t, S, heads=heads, d=d, dtype=dtype, cols=cols)
        calls.extend(rec)
        opts.append(structure.split_bounds(S, structure.boundaries(starts, surv)))
    for cand in ranked:
        s = cand[S]
        if s.block_k == bc and s.order == order:
            opts.append(s.bounds(S))
    extra = []
    first, last = {bc} & set(range(1, S)), {(S - 1) // bc * bc} & set(range(1, S))
    for b in opts:
        inner = {j0 for j0, _ in b[1:]}
        for edges in (first, last, first | last):
            if not edges <= inner:
                extra.append(structure.split_bounds(S, tuple(sorted(inner | edges))))
    extra.append(structure.split_bounds(S, tuple(range(bc, S, bc))))  # every tile its own split
    seen, out = set(), []
    for b in opts + extra:
        sizes = [j1 - j0 for j0, j1 in b]
        if len(set(sizes[:-1])) > 1 or sizes[-1] > sizes[0]:
            continue  # every cut of split_rules is equal splits but a shorter last one
        if b not in seen:
            seen.add(b)
            out.append(b)
    return out


def fingerprint(fn: Callable, *, dtype: str = "bf16", lengths=DEFAULT_LENGTHS, heads: int = 16, d: int = 64,
                seed: int = 0, progress: Callable[[str], None] | None = None, matmul: Callable | None = None,
                num_splits: int | None = None) -> dict:
    """The fingerprint of an SDPA-signature callable ``fn(q, k, v, is_causal=False)`` in ``dtype``.

    ``matmul``: the kernel's matrix unit as a callable ``(a, b, c) -> a @ b + c`` (float32 out), named by
    :func:`attnum.audit.fingerprint.mma_id.identify_mma`; without it ``mma`` says why it is not identified.
    ``num_splits``: call the target's decode entry point (a serving target) with that split count
    instead of its own choice; the SDPA entry point is then not used.
    Returns the JSON document of docs/fingerprint.md (kv_block, splits, merge, sites, policy,
    bit_exact_fraction, residual_ulp, calls, seconds, ...)."""
    probes.torch_dtype(dtype)
    lengths = tuple(sorted({int(S) for S in lengths}))
    if not lengths or min(lengths) < 8:
        raise bad_value("lengths", lengths, "key lengths of at least 8")
    if heads * d < 4:
        raise bad_value("heads", heads, "heads * d >= 4 (two probe columns per call)")
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    if num_splits is not None:
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
            raise bad_value("num_splits", num_splits, "a positive integer, or None (the kernel's own choice)")
        if not callable(getattr(fn, "decode", None)):
            raise bad_value("num_splits", num_splits, "None for a target without a decode entry point "
                                                      "(the serving protocol's decode)")
    t = probes.CountedTarget(fn, entry="auto" if num_splits is None else "decode", num_splits=num_splits)
    per_length, probe_calls = {}, []
    for S in lengths:
        say(f"swamping probes at S={S}")
        cols = probes.swamp_columns(S)
        surv, rec = probes.run_swamp(t, S, heads=heads, d=d, dtype=dtype, cols=cols)
        probe_calls.extend(rec)
        per_length[S] = structure.consistent(cols, surv, S)
    ranked = structure.rank(per_length)
    say("fitting inputs")
    fit_calls = []
    for S in lengths:
        q, k, v = probes.random_inputs(S, heads=heads, d=d, dtype=dtype, seed=seed)
        fit_calls.append((q, k, v, t(q, k, v)))
    policies = search.policy_candidates(dtype) + search.family_candidates(dtype)  # the flash policies first
    replays = search.Replays()  # one replay per (call, structure at its length, merge if split, policy)
    pairs = _proposed(ranked, lengths, [*search.family_candidates(dtype)[:1], policies[0]], probe_calls, replays)
    say(f"{len(pairs)} tile hypotheses from the probes")
    found, tried, staged = [], [], []
    for bc, order in pairs:
        say(f"split probes for Bc={bc} ({order})")
        options = {S: _bounds_options(t, S, bc, order, ranked, per_length, heads=heads, d=d, dtype=dtype,
                                      calls=probe_calls) for S in lengths}
        combos = _combos(options)
        # A sequential matmul inside a tile swamps like a chain of 1-key tiles: the probes cannot always
        # rank the true tile first. The closest replay of the fitting inputs goes first, and among near
        # ties (to 0.1) the larger tile (a 1-key chain is rare and the slowest to replay). Only the order
        # of the search changes: every answer is still the replay's.
        # Then the fewer splits: a split of one tile merged online can equal a chain of tiles but for
        # its last fp32 bits, which a 16-bit output may round away.
        close = search.closeness(combos[0], bc, order, policies[:2] + search.family_candidates(dtype)[:1],
                                 fit_calls[:1], replays)
        n_splits = sum(len(b) for b in combos[0].values())
        staged.append((-round(close, 1), n_splits, -bc, len(staged), bc, order, combos))
    staged.sort(key=lambda x: x[:4])
    for n, (*_, bc, order, combos) in enumerate(staged):
        say(f"replay for Bc={bc} ({order})")
        shaped = search.structural([(b, bc, order) for b in combos], [policies[0], *search.family_candidates(dtype)[:1]],
                                   probe_calls, replays)
        tried.append({"kv_block": bc, "order": order, "bounds_options": len(combos), "structural": len(shaped)})
        found = search.fit(shaped, MERGES, policies, fit_calls, probe_calls, replays)
        if found:  # the other tile hypotheses' structures that reproduce under the policies that fitted
            pols = list({id(c.policy): c.policy for c in found}.values())
            with one_thread():
                for *_, bc2, order2, combos2 in staged[n + 1:]:
                    for b in combos2[:8]:
                        found += search.found_for(b, bc2, order2, MERGES, pols, fit_calls, probe_calls, replays)
            break
    doc = {"dtype": dtype, "lengths": list(lengths), "heads": heads, "head_dim": d, "hypotheses": tried}
    if not found:
        doc.update(_unexplained(pairs, ranked, lengths, fit_calls))
    else:
        say(f"{len(found)} candidate(s) reproduce the probes; checking on fresh inputs")
        fresh = []
        for S in lengths:
            q, k, v = probes.random_inputs(S, heads=heads, d=d, dtype=dtype, seed=seed + 1)
            fresh.append((q, k, v, t(q, k, v)))
        # Of the structures that reproduce, the one with the fewest splits (a chain of tiles and the same
        # tiles as splits merged online in order differ in fp32 last bits only); the others are listed.
        best = min(found, key=lambda c: (sum(len(b) for b in c.bounds.values()), found.index(c)))
        frac, resid = search.exact_fraction(best, fresh)
        doc.update(_explained(found, best, frac, resid, lengths, heads, d))
    if matmul is None:
        doc["mma"] = NO_MATMUL
    else:
        from attnum.audit.fingerprint.mma_id import identify_mma

        say("matrix unit: crafted tiles")
        doc["mma"] = identify_mma(matmul, dtype=dtype if dtype != "fp32" else "tf32")
    doc["entry"] = t.entry  # sdpa, or decode for a serving target without an SDPA entry point
    doc["num_splits_asked"] = num_splits
    doc["calls"] = t.calls
    doc["target_seconds"] = round(t.seconds, 3)
    doc["seconds"] = round(time.perf_counter() - t0, 3)
    return doc


def _proposed(ranked, lengths, first_policies, probe_calls, replays) -> list[tuple[int, str]]:
    """The (Bc, order) pairs to test, at most :data:`TOP_STRUCTURES`. The probes rank structures by how
    many probes they leave unknown, which favours one chain over split ones (a probe across splits is
    unknown by construction), so the first :data:`PROPOSED` pairs are re-ranked by replaying their ranked
    structures on the probe calls under ``first_policies``: by the best fraction of probes, across splits
    too, whose e survives as the target's did (exact sums: hardly a matter of the policy), the probes'
    rank breaking ties. A pair's replays stop once it cannot enter the best :data:`TOP_STRUCTURES`; the
    first policy (attnum's flash, the slower replay) scores only a pair's best-ranked structure. Only the
    order of the search changes, before any split probe spends a target call."""
    structures: dict[tuple, list[dict]] = {}
    for cand in ranked:
        structures.setdefault((cand[lengths[0]].block_k, cand[lengths[0]].order), []).append(cand)
    scored: list[tuple] = []
    with one_thread():  # the emulation's bits do not depend on the thread count
        for i, ((bc, order), cands) in enumerate(list(structures.items())[:PROPOSED]):
            floor = -sorted(scored)[TOP_STRUCTURES - 1][0] if len(scored) >= TOP_STRUCTURES else 0.0
            best = 0.0
            for n, c in enumerate(cands):
                bounds = {S: c[S].bounds(S) for S in lengths}
                for p in first_policies:
                    cand = search.Candidate(bounds, bc, order, "online" if isinstance(p, SumDecode) else "lse", p)
                    if search.pairs_with(p, order, cand.merge) and (n == 0 or isinstance(p, SumDecode)):
                        best = max(best, search.survival_match(cand, probe_calls, replays, max(floor, best)))
            scored.append((-best, i, bc, order))
    return [(bc, order) for *_, bc, order in sorted(scored)[:TOP_STRUCTURES]]


def _combos(options: dict[int, list]) -> list[dict]:
    """Every choice of one bounds option per length (at most 32, in option order)."""
    combos = [{}]
    for S, opts in options.items():
        combos = [{**c, S: b} for c in combos for b in opts][:32]
    return combos


def _explained(found, best, frac, resid, lengths, heads, d) -> dict:
    from attnum.audit.fingerprint.rules import matching_cuts, matching_rules

    splits = {str(S): len(best.bounds[S]) for S in lengths}
    same = [c for c in found if (c.bounds, c.block_k, c.order) == (best.bounds, best.block_k, best.order)]
    merges = sorted({c.merge for c in same if c.merge})
    structures = {(c.block_k, c.order, tuple(sorted(c.bounds.items()))) for c in found}
    others = []
    for c in found:
        alt = {"kv_block": c.block_k, "kv_order": c.order,
               "split_bounds": {str(S): [list(r) for r in c.bounds[S]] for S in lengths}}
        if (c.bounds, c.block_k, c.order) != (best.bounds, best.block_k, best.order) and alt not in others:
            others.append(alt)
    spec = search.policy_spec(best.policy)
    return {
        "kv_block": best.block_k,
        "kv_order": best.order,
        "structure_determined": len(structures) == 1,
        "splits": splits,
        "split_bounds": {str(S): [list(r) for r in best.bounds[S]] for S in lengths},
        "structure_alternatives": others,
        "split_rules": matching_rules(best.bounds, best.block_k, best.order, heads=heads, d=d),
        "split_cuts": matching_cuts(best.bounds),
        "merge": (merges[0] if len(merges) == 1 else {"undetermined": merges}) if merges else "none (one split)",
        "sites": search.site_table([best] + [c for c in found if c is not best]),
        "policy": spec,
        "candidates": len(found),
        "tile_arithmetic": (best.policy.describe() if isinstance(best.policy, SumDecode)
                            else "matmul per tile (attnum's flash / decode emulation)"),
        "reproduction": _reproduction(best, spec, lengths),
        "bit_exact_fraction": frac,
        "residual_ulp": resid,
        "unexplained": None if frac == 1.0 else "the replay differs on fresh inputs: an arithmetic the "
                                                 "probes and fitting inputs did not exercise",
    }


def _reproduction(best, spec: str, lengths) -> str:
    if isinstance(best.policy, SumDecode):
        return (f"attnum.kernels.triton.sum_decode.sum_decode(q, k, v, bounds=split_bounds[S], "
                f"block_k={best.block_k}, fused={best.policy.fused})")
    if all(len(best.bounds[S]) == 1 for S in lengths):
        return (f"attnum.flash_attention(q, k, v, policy={spec!r}, block_k={best.block_k}, "
                f"kv_order={best.order!r})")
    return (f"attnum.attention.serving.decode.decode_attention(q, k, v, is_causal=False, policy={spec!r}, "
            f"split_rule=SplitPlan(bounds, {best.block_k}, {best.merge!r}, kv_order={best.order!r})) "
            "with bounds from split_bounds")


def _unexplained(pairs, ranked, lengths, fit_calls) -> dict:
    """No candidate reproduces the target: the best-ranked structure under FA2's policy is reported
    with its fraction of bit-identical elements, as a residual and never as a match."""
    out = {"kv_block": None, "kv_order": None, "splits": None, "merge": None, "sites": None, "policy": None,
           "bit_exact_fraction": None, "residual_ulp": None,
           "unexplained": "no candidate explains it: no (tile, split, merge, policy) of the search reproduces "
                          "the probes and the fitting inputs bit for bit"}
    if ranked:
        top = ranked[0]
        out["closest_structure"] = {str(S): {"kv_block": top[S].block_k, "span": top[S].span,
                                             "order": top[S].order, "unknown_probes": top[S].unknown}
                                    for S in lengths}
    return out
