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
from attnum.audit.fingerprint import document, families, fresh, hypotheses, probes, search, structure
from attnum.audit.fingerprint import resolve as resolving
from attnum.audit.fingerprint.search import Candidate
from attnum.errors import AttnumEnvironmentError, bad_value
from attnum.numerics.threads import one_thread

DEFAULT_LENGTHS = (512, 1200)
NO_MATMUL = ("not identified from a matmul callable: none given (pass one, --matmul, to name the architecture of a "
             "kernel's matmuls; the attention's own bits show a matrix unit only where P V accumulates on it: "
             "see architectures)")


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
    except (MemoryError, RuntimeError) as exc:
        if not mem.out_of_memory(exc):
            raise
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
        found, tried = hypotheses.tiled(t, dtype, lengths, heads, d, ranked, fit_calls, structural_calls,
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
        doc["resolve"] = "resolve=True (--resolve) runs " + resolving.plan(lengths, seed)
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
