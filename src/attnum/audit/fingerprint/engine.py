"""``fingerprint(target)``: which arithmetic a black-box attention kernel implements, from its outputs.

Shape alphabet: B = 1 batch, H heads (``heads``), N = 1 query, S keys (each of ``lengths``), d = dv head dim.

The steps (docs/fingerprint.md):

1. swamping probes at each length (:func:`probes.swamp_columns`): the structures (Bc, split span,
   walk order, and on a matrix unit the group size and whether O is its accumulator) consistent with
   which e survived (:mod:`structure`); the fraction-bit probes (:func:`probes.fraction_columns`);
2. fitting inputs (:func:`probes.random_inputs`); the un-tiled family (:mod:`families`) replayed first;
3. for the best-ranked hypotheses, the split probes (:func:`probes.boundary_columns`) give the split
   starts at each length; every (structure, merge, arithmetic) of the hypothesis' families replayed
   through attnum's emulation and kept when it reproduces both the fitting calls and the probe calls bit
   for bit (:mod:`search`);
4. the answer checked on fresh inputs of other seeds, magnitudes and an unprobed length (:mod:`fresh`);
   with ``resolve``, undetermined choices told apart by more calls (:mod:`resolve`).

Every call of the target goes through one :class:`probes.CountedTarget`: ``calls`` counts them all. Every
allocation is sized first against one memory budget (:mod:`budget`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from attnum.audit.fingerprint import budget as mem
from attnum.audit.fingerprint import document, families, fresh, probes, search, structure
from attnum.audit.fingerprint import resolve as resolving
from attnum.audit.fingerprint.search import Candidate, Shape
from attnum.errors import AttnumEnvironmentError, bad_value
from attnum.kernels.triton.sum_decode import SumDecode
from attnum.numerics.threads import one_thread

MERGES = ("lse", "online", "ratio")
DEFAULT_LENGTHS = (512, 1200)
TOP_STRUCTURES = 4  # hypotheses confirmed by replay, best ranked first
PROPOSED = 12  # hypotheses of the probes' ranking re-ranked by a first replay
MAX_TILE = 256  # the largest tile tried where the probes cannot see it (a forward MMA chain)
PADDING = 16  # the ranking replays no Triton decode structure whose padded tiles hold 16x the keys
NO_MATMUL = ("not identified: no matmul callable given (an attention call's outputs do not isolate its matrix "
             "unit; pass one to name an attnum.numerics.mma.dense architecture)")


def _check(dtype, lengths, heads, d, num_splits, fn) -> tuple:
    probes.torch_dtype(dtype)
    try:
        lengths = tuple(sorted({int(S) for S in lengths}))
    except (TypeError, ValueError):
        raise bad_value("lengths", lengths, "key lengths of at least 8") from None
    if not lengths or min(lengths) < 8:
        raise bad_value("lengths", lengths, "key lengths of at least 8")
    if max(lengths) > probes.MAX_LENGTH[dtype]:
        raise bad_value("lengths", lengths, f"key lengths of at most {probes.MAX_LENGTH[dtype]} for {dtype} (the "
                                            "swamping probe's e / S must not round to 0 in the output)")
    for name, value in (("heads", heads), ("d", d)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad_value(name, value, "a positive integer")
    if heads * d < 4:
        raise bad_value("heads", heads, "heads * d >= 4 (two probe columns per call)")
    if num_splits is not None:
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
            raise bad_value("num_splits", num_splits, "a positive integer, or None (the kernel's own choice)")
        if not callable(getattr(fn, "decode", None)):
            raise bad_value("num_splits", num_splits, "None for a target without a decode entry point "
                                                      "(the serving protocol's decode)")
    return lengths


def fingerprint(fn: Callable, *, dtype: str = "bf16", lengths=DEFAULT_LENGTHS, heads: int = 16, d: int = 64,
                seed: int = 0, progress: Callable[[str], None] | None = None, matmul: Callable | None = None,
                num_splits: int | None = None, memory=None, resolve: bool = False) -> dict:
    """The fingerprint of an SDPA-signature callable ``fn(q, k, v, is_causal=False)`` in ``dtype``.

    ``matmul``: the kernel's matrix unit as a callable ``(a, b, c) -> a @ b + c`` (float32 out), named by
    :func:`attnum.audit.fingerprint.mma_id.identify_mma`; without it ``mma`` says why it is not identified.
    ``num_splits``: call the target's decode entry point (a serving target) with that split count
    instead of its own choice; the SDPA entry point is then not used. ``memory``: the budget in bytes or
    as ``4G`` (None: :func:`budget.default_budget`). ``resolve``: tell undetermined choices apart with more
    calls. Returns the JSON document of docs/fingerprint.md (kv_block, splits, merge, sites, policy,
    bit_exact_fraction, residual_ulp, calls, seconds, peak_rss_mib, ...). Raises
    :class:`probes.TargetFailed` when the target raises."""
    lengths = _check(dtype, lengths, heads, d, num_splits, fn)
    budget = mem.Budget(mem.parse_memory(memory, param="memory"))
    mem.check_shape(lengths, heads=heads, d=d, dtype=dtype, budget=budget.limit)
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    t = probes.CountedTarget(fn, entry="auto" if num_splits is None else "decode", num_splits=num_splits)
    try:
        doc = _fingerprint(t, dtype, lengths, heads, d, seed, say, num_splits, budget, resolve)
    except MemoryError:
        raise AttnumEnvironmentError(f"the fingerprint ran out of memory here (budget {budget.limit / 2**30:.2f} "
                                     "GiB, --memory): use fewer heads or shorter lengths") from None
    doc["mma"] = NO_MATMUL if matmul is None else _identify(matmul, dtype, say)
    doc["entry"] = t.entry  # sdpa, or decode for a serving target without an SDPA entry point
    doc["output_dtype"] = str(t.out_dtype).removeprefix("torch.")
    doc["num_splits_asked"] = num_splits
    doc["calls"] = t.calls
    doc["target_seconds"] = round(t.seconds, 3)
    doc["seconds"] = round(time.perf_counter() - t0, 3)
    doc["peak_rss_mib"] = round(mem.peak_rss_bytes() / 2 ** 20, 1)
    doc["memory_budget_mib"] = round(budget.limit / 2 ** 20, 1)
    doc["skipped"] = budget.skipped
    return doc


def _identify(matmul, dtype: str, say) -> dict | str:
    """identify_mma's result; a matmul callable that raises is reported in the field, the document kept."""
    from attnum.audit.fingerprint.mma_id import identify_mma
    from attnum.errors import AttnumInputError

    say("matrix unit: crafted tiles")
    try:
        return identify_mma(matmul, dtype=dtype if dtype != "fp32" else "tf32")
    except AttnumInputError as exc:
        return f"not identified: {exc}"
    except Exception as exc:  # noqa: BLE001 - the user's matmul callable failed: its failure, named
        return f"not identified: the matmul callable raised {type(exc).__name__}: {str(exc)[:300]}"


def probe_columns(lengths, *, heads: int, d: int) -> dict[int, probes.SwampColumns]:
    """{S: the swamping probes at S}: the forward and reverse families at every length, and once the
    accumulate and fraction-bit probes, at the length whose last call has the most room for them (no
    call of their own when they fit)."""
    per_call = heads * d // 2
    base = {S: probes.swamp_columns(S) for S in lengths}
    extra = {S: probes.SwampColumns.join(probes.accumulate_columns(S), probes.fraction_columns(S)) for S in lengths}
    room = {S: -len(base[S]) % per_call - len(extra[S]) for S in lengths}
    at = max(lengths, key=lambda S: (room[S] >= 0, room[S], S))
    return {S: probes.SwampColumns.join(base[S], extra[S]) if S == at else base[S] for S in lengths}


def _fingerprint(t, dtype, lengths, heads, d, seed, say, num_splits, budget, resolve) -> dict:
    groups = families.mma_groups(dtype)
    per_length, probe_calls = {}, []
    for S, cols in probe_columns(lengths, heads=heads, d=d).items():
        say(f"swamping probes at S={S}")
        surv, rec = probes.run_swamp(t, S, heads=heads, d=d, dtype=dtype, cols=cols, keep_v=budget.keep_v)
        probe_calls.extend(rec)
        per_length[S] = structure.consistent(cols, surv, S, groups=groups)
    ranked = structure.rank(per_length)
    say("fitting inputs")
    fit_calls = []
    for S in lengths:
        q, k, v = probes.random_inputs(S, heads=heads, d=d, dtype=dtype, seed=seed)
        fit_calls.append(probes.Call(q, k, t(q, k, v), None, v, dtype, what="fitting"))
    _labels, (q, k, v) = probes.magnitude_inputs(lengths[0], heads=heads, d=d, dtype=dtype, seed=seed + 100)
    fit_calls.append(probes.Call(q, k, t(q, k, v), None, v, dtype, what="fitting magnitudes"))
    replays = search.Replays(budget)
    structural_calls = list(probe_calls)  # the split probes join them (every call is a replay check too)
    say("un-tiled attention")
    whole = {S: ((0, S),) for S in lengths}
    with one_thread():
        found = [c for p in families.untiled_candidates(dtype)
                 if search.agrees(c := Candidate(whole, None, "forward", None, p), fit_calls, replays)
                 and search.agrees(c, probe_calls, replays)]
    tried = []
    if not found:
        found, tried = _tiled(t, dtype, lengths, heads, d, ranked, per_length, fit_calls, structural_calls,
                              probe_calls, replays, say)
    doc = {"dtype": dtype, "lengths": list(lengths), "heads": heads, "head_dim": d, "hypotheses": tried,
           "fraction_bit_probes": _fraction_reading(probe_calls)}
    if not found:
        doc.update(document.unexplained(ranked, lengths))
        return doc
    if resolve and len(found) > 1:
        extra = resolving.resolve_calls(t, lengths, heads=heads, d=d, dtype=dtype, seed=seed, say=say)
        kept = resolving.resolve(found, extra, replays)
        doc["resolved"] = {"calls": len(extra), "candidates_before": len(found), "candidates_after": len(kept)}
        found = kept or found  # none left: the target is not deterministic on those calls (said below)
        if not kept:
            doc["resolved"]["note"] = "no candidate reproduces the extra calls: none is kept, the earlier set shown"
    say(f"{len(found)} candidate(s) reproduce the probes; checking on fresh inputs")
    # Of the structures that reproduce, the one with the fewest splits (a chain of tiles and the same
    # tiles as splits merged online in order differ in fp32 last bits only); the others are listed.
    best = min(found, key=lambda c: (c.splits(), found.index(c)))
    doc.update(document.explained(found, best, lengths, heads=heads, d=d))
    if doc["undetermined"] and not resolve:
        doc["resolve"] = "--resolve runs " + resolving.plan(lengths, seed)
    doc["architectures"] = _architectures(best, found, fit_calls + probe_calls, replays)
    calls, left = fresh.fresh_calls(t, lengths, heads=heads, d=d, dtype=dtype, seed=seed + 1, say=say)
    frac, resid, rows, left2 = fresh.check(best, calls, replays)
    doc["fresh_checks"] = rows
    doc["fresh_left_out"] = left + left2
    doc["bit_exact_fraction"], doc["residual_ulp"] = frac, resid
    worst = [r for r in rows if r["bit_exact_fraction"] < 1.0]
    doc["unexplained"] = None if not worst else (
        "the replay differs on fresh inputs (" + "; ".join(f"{r['inputs']}: {r['bit_exact_fraction']:.4g} bit-exact"
                                                          for r in worst[:4])
        + "): an arithmetic the probes and fitting inputs did not exercise")
    return doc


def _fraction_reading(calls) -> dict:
    """Which e = M 2**-f survived beside +M and -M in one group (probes.fraction_columns): on a matrix unit
    F >= f exactly for the surviving f (a sequential fp32 sum keeps every e). {f: survived, dropped or mixed}."""
    seen: dict[int, list[bool]] = {}
    for rec in calls:
        c = rec.cols
        if c is None or rec.what != "swamping":
            continue
        below = np.full(len(c), probes.E_BELOW_M) if c.e_below is None else c.e_below
        mine = ((c.minus == c.plus + 1) & (c.epos == c.plus + 2) & (c.plus % probes.ACCUMULATE_STEP == 0)
                & (c.plus < probes.ACCUMULATE_STEP * probes.FRACTION_BASES) & np.isin(below, probes.F_PROBES))
        surv = probes.survival(rec.out, len(c))
        for i in np.nonzero(mine)[0]:
            seen.setdefault(int(below[i]), []).append(bool(surv[i]))
    return {str(f): ("survived" if all(v) else "dropped" if not any(v) else "mixed") for f, v in sorted(seen.items())}


def _architectures(best: Candidate, found, calls, replays) -> dict | None:
    """For an answer on a matrix unit: every architecture whose MMA reproduces every call in the answer's
    place (the bits cannot tell them apart on these calls), from :data:`attnum.numerics.mma.sites.POLICY_ARCHES`."""
    arch = families.arch_of(best.policy)
    if arch is None:
        return None
    from attnum.kernels.triton.dot_flash import ARCHES as TRITON_ARCHES
    from attnum.kernels.triton.dot_flash import DotFlash
    from attnum.numerics.mma.arch import ARCHS
    from attnum.numerics.mma.sites import POLICY_ARCHES

    kind = families.MMA_KIND[best.policy.inputs if isinstance(best.policy, DotFlash) else best.policy.inputs.name]
    archs = [a for a in (TRITON_ARCHES if isinstance(best.policy, DotFlash) else POLICY_ARCHES)
             if kind in ARCHS[a].instructions]
    same = []
    with one_thread():
        for a in archs:
            try:
                cand = Candidate(best.bounds, best.block_k, best.order, best.merge, families.with_arch(best.policy, a))
            except Exception:  # noqa: BLE001 - an architecture without this operand type: not a candidate
                continue
            if a == arch or search.agrees(cand, calls, replays):
                same.append(a)
    return {"answer": arch, "indistinguishable": same,
            "note": "every architecture listed reproduces every probe and fitting call bit for bit: the calls "
                    "made cannot tell them apart (their MMAs add these operands alike or differ only where "
                    "these inputs do not reach)"}


def _hyp_families(dtype: str, hyp: tuple, single: bool):
    """(arithmetics to fit, bases for the structural checks) of a hypothesis (Bc, order, group, chain)."""
    _bc, order, group, chain = hyp
    if not group:
        pols = families.policy_candidates(dtype)
        fam = families.family_candidates(dtype)
        return pols + fam, [pols[0], fam[0]], pols[:2] + fam[:1]
    mma = families.mma_candidates(dtype, group, chain)  # one base per architecture class first
    dots = families.dot_flash_candidates(dtype, group) if chain and single and order == "forward" else []
    bases = mma[:max(1, len(families.mma_classes(dtype).get(group, [])))]
    return mma + dots, bases + dots[:1], bases + dots[:1]


def _tiles(hyp: tuple, combo: dict) -> list[int]:
    """The tiles of a hypothesis: its own, or for a forward MMA chain (whose tiles swamp alike) every
    multiple of 8 (16 for groups of 16) up to :data:`MAX_TILE` and the longest split."""
    bc, order, group, chain = hyp
    if not (group and chain and order == "forward"):
        return [bc]
    longest = max(j1 - j0 for b in combo.values() for j0, j1 in b)
    step = max(8, group)
    return [b for b in range(step, MAX_TILE + 1, step) if b <= max(longest, step)] or [bc]


def _tiled(t, dtype, lengths, heads, d, ranked, per_length, fit_calls, structural_calls, probe_calls, replays, say):
    hyps = _proposed(ranked, lengths, dtype, structural_calls, replays)
    say(f"{len(hyps)} tile hypotheses from the probes")
    staged, tried = [], []
    for hyp in hyps:
        bc, order, group, chain = hyp
        say(f"split probes for Bc={bc} ({order}{f', MMA groups of {group}' if group else ''}"
            f"{', chained' if chain else ''})")
        options = {S: _bounds_options(t, S, hyp, ranked, heads=heads, d=d, dtype=dtype, calls=structural_calls)
                   for S in lengths}
        combos = _combos(options)
        single = all(len(b) == 1 for b in combos[0].values())
        pols, bases, close_bases = _hyp_families(dtype, hyp, single)
        for tile in _tiles(hyp, combos[0]):
            sh = Shape(combos[0], tile, order, group, chain)
            # A sequential matmul inside a tile swamps like a chain of 1-key tiles: the probes cannot always
            # rank the true tile first. The closest replay of the fitting inputs goes first, and among near
            # ties (to 0.1) the larger tile (a 1-key chain is rare and the slowest to replay). Only the order
            # of the search changes: every answer is still the replay's. Then the fewer splits: a split of one
            # tile merged online can equal a chain of tiles but for its last fp32 bits. Tiles a forward MMA
            # chain hides are ordered by the exact closeness.
            close = search.closeness(sh, close_bases, fit_calls[:1], replays)
            n_splits = sum(len(b) for b in combos[0].values())
            expanded = tile != bc
            staged.append(((-round(close, 1), n_splits, -close if expanded else 0.0, -tile, len(staged)),
                           (tile, order, group, chain), combos, pols, bases))
    staged.sort(key=lambda x: x[0])
    found = []
    for n, (_key, (tile, order, group, chain), combos, pols, bases) in enumerate(staged):
        say(f"replay for Bc={tile} ({order}{f', MMA groups of {group}' if group else ''})")
        shapes = search.structural([Shape(b, tile, order, group, chain) for b in combos], bases, structural_calls,
                                   replays)
        tried.append({"kv_block": tile, "order": order, "mma_group": group or None, "chained": chain,
                      "bounds_options": len(combos), "structural": len(shapes)})
        found = search.fit(shapes, MERGES, pols, fit_calls, probe_calls, replays)
        if found:  # the other hypotheses' structures that reproduce under the arithmetics that fitted
            fitted = list({id(c.policy): c.policy for c in found}.values())
            with one_thread():
                for _k2, (tile2, order2, g2, c2), combos2, pols2, _b2 in staged[n + 1:]:
                    same_family = [p for p in fitted if any(p is q or p == q for q in pols2)]
                    for b in combos2[:8]:
                        found += search.found_for(Shape(b, tile2, order2, g2, c2), MERGES, same_family, fit_calls,
                                                  probe_calls, replays)
            break
    return found, tried


def _bounds_options(t: probes.CountedTarget, S: int, hyp: tuple, ranked, *, heads, d, dtype, calls) -> list[tuple]:
    """Split ranges at S for one hypothesis: the split probes' answer, the tied spans of the swamping
    ranking, each with the first or the last tile start added or both (boundaries the split probes
    cannot see: they need two tiles in one split), and every tile a split of its own; only cuts of
    equal splits with a shorter last one (those of every rule in :mod:`attnum.attention.serving.split_rules`)."""
    bc, order = hyp[0], hyp[1]
    starts, cols = probes.boundary_columns(S, bc, order)
    opts = []
    if len(starts):
        surv, rec = probes.run_swamp(t, S, heads=heads, d=d, dtype=dtype, cols=cols, what="split")
        calls.extend(rec)
        opts.append(structure.split_bounds(S, structure.boundaries(starts, surv)))
    for cand in ranked:
        s = cand[S]
        if s.hypothesis == hyp:
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


def _proposed(ranked, lengths, dtype, records, replays) -> list[tuple]:
    """The hypotheses (Bc, order, group, chain) to test, at most :data:`TOP_STRUCTURES`. The probes rank
    structures by how many probes they leave unknown, which favours one chain over split ones (a probe
    across splits is unknown by construction), so the first :data:`PROPOSED` hypotheses are re-ranked by
    replaying their ranked structures on the probe calls under a base arithmetic of their families: by the
    best fraction of probes, across splits too, whose e survives as the target's did (exact sums: hardly a
    matter of the policy), the probes' rank breaking ties. A hypothesis' replays stop once it cannot enter
    the best :data:`TOP_STRUCTURES`; attnum's flash (the slower replay) scores only a hypothesis' best-ranked
    structure. Only the order of the search changes, before any split probe spends a target call."""
    structures: dict[tuple, list[dict]] = {}
    for cand in ranked:
        structures.setdefault(cand[lengths[0]].hypothesis, []).append(cand)
    scored: list[tuple] = []
    with one_thread():  # the emulation's bits do not depend on the thread count
        for i, (hyp, cands) in enumerate(list(structures.items())[:PROPOSED]):
            floor = -sorted(scored)[TOP_STRUCTURES - 1][0] if len(scored) >= TOP_STRUCTURES else 0.0
            best = 0.0
            single = all(c[S].span is None for c in cands[:1] for S in lengths)
            _pols, bases, _close = _hyp_families(dtype, hyp, single)
            for n, c in enumerate(cands):
                bounds = {S: c[S].bounds(S) for S in lengths}
                split = any(len(b) > 1 for b in bounds.values())
                padded = sum(len(b) * -(-max(j1 - j0 for j0, j1 in b) // hyp[0]) * hyp[0] for b in bounds.values())
                for p in bases:
                    merge = ("online" if isinstance(p, SumDecode) else "lse") if split else None
                    cand = Candidate(bounds, hyp[0], hyp[1], merge, p)
                    if isinstance(p, SumDecode) and padded > PADDING * sum(lengths):
                        continue  # splits padded to tiles far longer than themselves: a ranking replay too slow
                    if search.pairs_with(p, hyp[1], merge) and (n == 0 or isinstance(p, SumDecode)):
                        best = max(best, search.survival_match(cand, records, replays, max(floor, best)))
            scored.append((-best, i, hyp))
    return [hyp for *_, hyp in sorted(scored)[:TOP_STRUCTURES]]


def _combos(options: dict[int, list]) -> list[dict]:
    """Every choice of one bounds option per length (at most 32, in option order)."""
    combos = [{}]
    for S, opts in options.items():
        combos = [{**c, S: b} for c in combos for b in opts][:32]
    return combos
