"""The search over candidate arithmetics: structure x merge x arithmetic, each replayed through attnum's
emulation and kept only when it reproduces the target's outputs bit for bit.

A candidate is a :class:`Candidate`: the key ranges of the splits at each probed length, the KV tile
Bc, the order the tiles are walked in, the merge method of the split partials and an arithmetic of
:mod:`attnum.audit.fingerprint.families`: a policy (:mod:`attnum.numerics.policy`: tile matmuls, or an
architecture's MMA with ``mma=``), replayed by :func:`attnum.attention.serving.decode.decode_attention` with a
:class:`attnum.attention.serving.split_rules.SplitPlan` holding exactly those ranges (one range: the plain
flash forward, no merge); un-tiled attention (:class:`families.Untiled`, no tile, no split); the Triton
decode family (:class:`attnum.kernels.triton.sum_decode.SumDecode`, walked forward, its splits merged
online); Triton's flash forward (:class:`attnum.kernels.triton.dot_flash.DotFlash`, forward, no split).
Every candidate reproducing the fitting inputs is kept: a site on which they disagree is reported as
undetermined, never guessed.

Replays go through one :class:`Replays` per fingerprint: memoised, and sized before they run against the
fingerprint's memory budget (:mod:`attnum.audit.fingerprint.budget`); a replay over it is skipped (the
candidate does not reproduce), with a line in the document.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import torch

from attnum.attention.serving.decode import decode_attention
from attnum.attention.serving.split_rules import SplitPlan
from attnum.audit.fingerprint import budget as mem
from attnum.audit.fingerprint.families import OBSERVED_SITES, EagerOps, Untiled, arch_of, policy_spec
from attnum.audit.fingerprint.probes import bits, survival
from attnum.kernels.triton.dot_flash import DotFlash, dot_flash
from attnum.kernels.triton.sum_decode import SumDecode, sum_decode
from attnum.numerics.formats import format_of_dtype
from attnum.numerics.metrics import ulp
from attnum.numerics.policy import Policy
from attnum.numerics.threads import one_thread

__all__ = ["Candidate", "Replays", "Shape", "Skipped", "agrees", "policy_spec"]

Shape = namedtuple("Shape", "bounds block_k order group chain")
"""A structure to replay: {S: split ranges}, the tile Bc, its walk order, the MMA group size L (0: none)
and whether the accumulator runs through the MMA chain."""


@dataclass(frozen=True)
class Candidate:
    """One arithmetic: ``bounds`` {S: key ranges of the splits}, tiles of ``block_k`` walked in ``order``,
    partials merged by ``merge`` (None: no split at any length), under ``policy``."""

    bounds: dict
    block_k: int | None
    order: str
    merge: str | None
    policy: Policy | SumDecode | DotFlash | Untiled | EagerOps

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The candidate on (1, H, 1, d) queries against S keys, in the emulation's own dtype."""
        S = k.shape[-2]
        p = self.policy
        if isinstance(p, Untiled):
            from attnum.attention.baseline import baseline_attention

            return baseline_attention(q, k, v, policy=p.policy)
        if isinstance(p, EagerOps):
            return p.run(q, k, v)
        if isinstance(p, SumDecode):
            return sum_decode(q, k, v, bounds=self.bounds[S], block_k=self.block_k, fused=p.fused)
        if isinstance(p, DotFlash):
            return dot_flash(q, k, v, block_n=self.block_k, arch=p.arch, fused=p.fused)
        plan = SplitPlan((self.bounds[S],), self.block_k, self.merge or "lse", kv_order=self.order)
        return decode_attention(q, k, v, is_causal=False, policy=p, split_rule=plan)

    def with_bounds(self, S: int, ranges: tuple) -> Candidate:
        return Candidate({**self.bounds, S: ranges}, self.block_k, self.order, self.merge, self.policy)

    def splits(self) -> int:
        return sum(len(b) for b in self.bounds.values())


class Skipped(Exception):  # noqa: N818 - a replay the budget does not allow: the candidate is not run
    pass


class Replays:
    """Candidate replays on recorded calls (:class:`attnum.audit.fingerprint.probes.Call`), memoised for one
    fingerprint, each cast to the target's output dtype. A replay on S keys depends on the split ranges at
    S only (not at the other lengths), on the merge only when S has more than one split, and on the tile,
    order and arithmetic: structures that differ elsewhere share it. The calls are kept here, so the ids
    in the keys stay theirs. ``budget``: replays over it raise :class:`Skipped` (and are noted there)."""

    def __init__(self, budget: mem.Budget | None = None) -> None:
        self._out: dict[tuple, torch.Tensor] = {}
        self._keep: dict[int, object] = {}
        self.budget = budget

    def run(self, cand: Candidate, call) -> torch.Tensor:
        b = None if isinstance(cand.policy, (Untiled, EagerOps)) else cand.bounds[call.S]
        merge = cand.merge if b is not None and len(b) > 1 else None
        key = (id(call), b, cand.block_k, cand.order, merge, cand.policy)
        out = self._out.get(key)
        if out is None:
            if self.budget is not None:
                H, d = call.k.shape[1], call.k.shape[-1]
                need = mem.replay_bytes(cand.policy, b or ((0, call.S),), cand.block_k, S=call.S, heads=H, d=d)
                if not self.budget.allows(need):
                    self.budget.skip(_label(cand, call.S), need)
                    raise Skipped
            try:
                out = cand.run(call.q, call.k, call.v).to(call.out.dtype)
            except (MemoryError, RuntimeError) as exc:
                if not mem.out_of_memory(exc):
                    raise
                if self.budget is not None:
                    self.budget.skip(_label(cand, call.S), why="MemoryError in its replay (not enough memory here)")
                raise Skipped from None
            self._out[key] = out
            self._keep[id(call)] = call
        return out


def _label(cand: Candidate, S: int) -> str:
    b = cand.bounds.get(S) if isinstance(cand.bounds, dict) else None
    return (f"{policy_spec(cand.policy)} with Bc={cand.block_k}, {cand.order}, "
            f"{len(b) if b else 1} split(s) at S={S}")


def _run(cand: Candidate, call, replays: Replays | None) -> torch.Tensor:
    if replays is not None:
        return replays.run(cand, call)
    return cand.run(call.q, call.k, call.v).to(call.out.dtype)


def pairs_with(policy, order: str, merge: str | None) -> bool:
    """Whether ``policy`` can run with this walk order and merge: the Triton decode family walks forward
    and merges its splits online, its own way; Triton's flash forward walks forward and has no split."""
    if isinstance(policy, SumDecode):
        return order == "forward" and merge in (None, "online")
    if isinstance(policy, DotFlash):
        return order == "forward" and merge is None
    return True


def agrees(cand: Candidate, calls, replays: Replays | None = None) -> bool:
    """Whether ``cand`` reproduces every recorded call bit for bit (False when its replay is skipped)."""
    try:
        for call in calls:
            if not np.array_equal(bits(_run(cand, call, replays)), bits(call.out)):
                return False
    except Skipped:
        return False
    return True


def exact_fraction(cand: Candidate, calls, replays: Replays | None = None) -> tuple[float, float]:
    """(fraction of output elements bit-identical, largest residual in ulps of the output format)."""
    same = total = 0
    worst = 0.0
    for call in calls:
        out = call.out
        try:
            with one_thread():  # the emulation's bits do not depend on the thread count
                mine = _run(cand, call, replays)
        except Skipped:
            return 0.0, float("inf")
        eq = bits(mine) == bits(out)
        same += int(eq.sum())
        total += eq.size
        if not eq.all():
            a, b = mine.double().reshape(-1), out.double().reshape(-1)
            r = ((a - b).abs() / ulp(b, format_of_dtype(out.dtype)))[~torch.from_numpy(eq)]
            worst = max(worst, float(r.max()) if torch.isfinite(r).all() else float("inf"))
    return (same / total if total else 0.0), worst


def same_survival(cand: Candidate, records, replays: Replays | None = None) -> bool:
    """Whether ``cand`` lets the same e survive as the target did in every swamping probe whose +M and
    -M share a split: a structural check that hardly depends on the policy (the probe values are exact
    in every format) and not on the merge (which only sees probes across splits)."""
    from attnum.audit.fingerprint.structure import cross_split

    try:
        for rec in records:
            n = len(rec.cols)
            mask = ~cross_split(rec.cols, cand.bounds[rec.S]) & rec.cols.modelled()
            if not np.array_equal(survival(_run(cand, rec, replays), n)[mask], survival(rec.out, n)[mask]):
                return False
    except Skipped:
        return False
    return True


def survival_match(cand: Candidate, records, replays: Replays | None = None, floor: float = 0.0) -> float:
    """The fraction of all swamping probes (across splits too) in which ``cand`` lets e survive exactly
    when the target did: a structural score that hardly depends on the policy. Once the score cannot
    reach ``floor`` any more the replays stop, and a value below ``floor`` is returned."""
    total = sum(int(r.cols.modelled().sum()) for r in records)
    missed = 0
    for rec in records:
        n, keep = len(rec.cols), rec.cols.modelled()
        try:
            missed += int((survival(_run(cand, rec, replays), n) != survival(rec.out, n))[keep].sum())
        except Skipped:
            return 0.0
        if missed > (1.0 - floor) * total:
            break
    return (total - missed) / total if total else 0.0


def structural(shapes: list[Shape], bases, records, replays: Replays | None = None) -> list[Shape]:
    """The structures that predict every known survival (:func:`structure.explains`) and whose replay
    under one of the ``bases`` shows the target's survivals within each split.

    Inside a tile the survivals are the tile's own summation order, which belongs to the arithmetic, not
    to the structure: attnum's tile matmul sums in whatever order the CPU's BLAS kernel does (MKL's
    AVX-512 sgemm blocks a 128-key tile's keys where its AVX2 path walks them one after another), the
    Triton decode family key after key, an MMA in groups. So a structure passes when any base arithmetic
    (one per family of the search) reproduces the survivals; a single base would make the answer depend on
    the CPU."""
    from attnum.audit.fingerprint.structure import explains

    keep = []
    with one_thread():  # the emulation's bits do not depend on the thread count
        for sh in shapes:
            if not explains(records, sh.bounds, sh.block_k, sh.order, sh.group, sh.chain):
                continue
            split = any(len(b) > 1 for b in sh.bounds.values())
            for b in bases:
                merge = ("online" if isinstance(b, SumDecode) else "lse") if split else None
                if pairs_with(b, sh.order, merge) and \
                        same_survival(Candidate(sh.bounds, sh.block_k, sh.order, merge, b), records, replays):
                    keep.append(sh)
                    break
    return keep


def found_for(sh: Shape, merges, policies, fit_calls, probe_calls, replays) -> list[Candidate]:
    """The (merge, arithmetic) candidates of one structure that reproduce the fitting and the probe calls."""
    split = any(len(b) > 1 for b in sh.bounds.values())
    found: list[Candidate] = []
    for m in (merges if split else (None,)):
        pols = policies if not found else list({id(c.policy): c.policy for c in found}.values())
        found += [c for p in pols if pairs_with(p, sh.order, m)
                  and agrees(c := Candidate(sh.bounds, sh.block_k, sh.order, m, p), fit_calls, replays)
                  and agrees(c, probe_calls, replays)]
    return found


def fit(shapes: list[Shape], merges, policies, fit_calls, probe_calls, replays: Replays | None = None
        ) -> list[Candidate]:
    """Every (structure, merge, arithmetic) reproducing the fitting calls, then the probe calls; the first
    structure with any wins. Merges are tried in turn; once one fits, the others are tried with the
    arithmetics that fitted (they and the merge act on different steps). The later structures are then
    replayed under the arithmetics that fitted: those that reproduce too are returned after the winner's
    candidates (the structure is undetermined: a split of a single tile, for one, can show only in its
    merge's last bits, which a 16-bit output may round away)."""
    with one_thread():  # the emulation's bits do not depend on the thread count
        for i, sh in enumerate(shapes):
            found = found_for(sh, merges, policies, fit_calls, probe_calls, replays)
            if found:
                pols = list({id(c.policy): c.policy for c in found}.values())
                for other in shapes[i + 1:]:
                    found += found_for(other, merges, pols, fit_calls, probe_calls, replays)
                return found
    return []


def closeness(sh: Shape, policies, calls, replays: Replays | None = None) -> float:
    """The best fraction of bit-identical output elements over ``policies`` (merge ``lse``, or online for
    the Triton decode family) on ``calls``: how near a structure comes before its policy is fitted."""
    best = 0.0
    split = any(len(b) > 1 for b in sh.bounds.values())
    for p in policies:
        merge = ("online" if isinstance(p, SumDecode) else "lse") if split else None
        if pairs_with(p, sh.order, merge):
            best = max(best, exact_fraction(Candidate(sh.bounds, sh.block_k, sh.order, merge, p), calls, replays)[0])
    return best


def _site(p, site: str) -> str:
    if isinstance(p, (SumDecode, DotFlash, EagerOps)):
        return p.sites()[site]
    return getattr(p.policy if isinstance(p, Untiled) else p, site).name


def _knob(p, knob: str) -> str:
    if knob == "tile":
        if isinstance(p, (SumDecode, DotFlash, EagerOps)):
            return p.spec()
        return "untiled" if isinstance(p, Untiled) else "matmul"
    if knob == "mma":
        return str(arch_of(p))
    if isinstance(p, SumDecode):
        return {"normalize": "divide", "exp2": "native", "acc_update": "each"}[knob]
    if isinstance(p, DotFlash):
        return {"normalize": "divide", "exp2": "exp2 (scale folded into log2 e)", "acc_update": "each"}[knob]
    if isinstance(p, EagerOps):
        return {"normalize": "torch.softmax", "exp2": "native", "acc_update": "each"}[knob]
    return str(getattr(p.policy if isinstance(p, Untiled) else p, knob))


def site_table(cands: list[Candidate]) -> dict[str, dict]:
    """site -> {format, determined, alternatives} over the exact candidates (their first as the answer);
    also the knobs normalize, exp2, acc_update, mma (the architecture whose MMA runs the matmuls, None for
    the CPU's) and tile (attnum's tile matmuls, un-tiled, or a Triton family)."""
    first = cands[0].policy
    table = {}
    for site in OBSERVED_SITES:
        names = sorted({_site(c.policy, site) for c in cands})
        table[site] = {"format": _site(first, site), "rounding": "nearest-even",
                       "determined": len(names) == 1, "alternatives": names}
    for knob in ("normalize", "exp2", "acc_update", "mma", "tile"):
        vals = sorted({_knob(c.policy, knob) for c in cands})
        table[knob] = {"format": _knob(first, knob), "determined": len(vals) == 1, "alternatives": vals}
    return table
