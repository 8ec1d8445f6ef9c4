"""The tiled search: which hypotheses (Bc, walk order, MMA group, chained) to try, their split ranges, and
the replay of each hypothesis' structures under the arithmetics of the families that fit it.

A hypothesis with no MMA group is tried with attnum's policies on CPU tile matmuls and the Triton decode
family; one with a group of L, with FA2's policy on the architectures whose MMA adds L products at a time
(chained or each tile from zero) and, for a forward chain with no split, Triton's flash forward. A forward
MMA chain hides its tile from the swamping probes: every multiple of 8 (16 for groups of 16) up to
:data:`MAX_TILE` is staged, ordered by how close its replay of the first fitting call comes.
"""

from __future__ import annotations

from attnum.audit.fingerprint import families, probes, search, structure
from attnum.audit.fingerprint.search import Candidate, Shape
from attnum.kernels.triton.sum_decode import SumDecode
from attnum.numerics.threads import one_thread

MERGES = ("lse", "online", "ratio")
TOP_STRUCTURES = 4  # hypotheses confirmed by replay, best ranked first
PROPOSED = 12  # hypotheses of the probes' ranking re-ranked by a first replay
MAX_TILE = 256  # the largest tile tried where the probes cannot see it (a forward MMA chain)
PADDING = 16  # the ranking replays no Triton decode structure whose padded tiles hold 16x the keys


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


def tiled(t, dtype, lengths, heads, d, ranked, fit_calls, structural_calls, probe_calls, replays, say
          ) -> tuple[list[Candidate], list[dict]]:
    """(the candidates that reproduce every call, first the winning structure's; the hypotheses tried)."""
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
