"""The search over candidate arithmetics: structure x merge x policy, each replayed through attnum's
emulation and kept only when it reproduces the target's outputs bit for bit.

A candidate is a :class:`Candidate`: the key ranges of the splits at each probed length, the KV tile
Bc, the order the tiles are walked in, the merge method of the split partials and a policy
(:mod:`attnum.numerics.policy`). It is replayed by :func:`attnum.attention.serving.decode.decode_attention`
with a :class:`attnum.attention.serving.split_rules.SplitPlan` holding exactly those ranges (one range: the
plain flash forward, no merge).

Policies tried (:func:`policy_candidates`): the named policies in the input format (``fa2``,
``uniform``, ``torch-eager``, uniform ``fp32``), FA2's with FA4's polynomial exp2, and each of them with
one site (scores, exp, probs, row_sum, rescale, acc, out) moved to another of bf16, fp16, fp32, or the
normalisation switched between division and reciprocal. Every policy reproducing the fitting inputs is
kept: a site on which they disagree is reported as undetermined, never guessed.

Beside attnum's policies, whose tiles are matmuls, the search tries the element-wise Triton decode
arithmetic (:class:`attnum.kernels.triton.sum_decode.SumDecode`, with and without FP fusion): the
``tl.sum`` of products of LightLLM's, SGLang's and vLLM's decode kernels under attnum's Triton model,
walked forward, its splits merged online.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnum.attention.serving.decode import decode_attention
from attnum.attention.serving.split_rules import SplitPlan
from attnum.audit.fingerprint.probes import bits, survival
from attnum.kernels.triton.sum_decode import SumDecode, sum_decode
from attnum.numerics.formats import format_of_dtype, get_format
from attnum.numerics.metrics import ulp
from attnum.numerics.policy import Policy, parse_policy
from attnum.numerics.threads import one_thread

OBSERVED_SITES = ("scores", "exp", "probs", "row_sum", "rescale", "acc", "out")
LOWERED = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Candidate:
    """One arithmetic: ``bounds`` {S: key ranges of the splits}, tiles of ``block_k`` walked in ``order``,
    partials merged by ``merge`` (None: no split at any length), under ``policy``."""

    bounds: dict
    block_k: int
    order: str
    merge: str | None
    policy: Policy | SumDecode

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The candidate on (1, H, 1, d) queries against S keys, in q's dtype."""
        S = k.shape[-2]
        if isinstance(self.policy, SumDecode):
            return sum_decode(q, k, v, bounds=self.bounds[S], block_k=self.block_k, fused=self.policy.fused)
        plan = SplitPlan((self.bounds[S],), self.block_k, self.merge or "lse", kv_order=self.order)
        out = decode_attention(q, k, v, is_causal=False, policy=self.policy, split_rule=plan)
        return out.to(q.dtype)


class Replays:
    """Candidate replays on recorded calls, memoised for one fingerprint. A replay on S keys depends on
    the split ranges at S only (not at the other lengths), on the merge only when S has more than one
    split, and on the tile, order and policy: structures that differ elsewhere share it. The recorded
    tensors are kept here, so the ids in the keys stay theirs."""

    def __init__(self) -> None:
        self._out: dict[tuple, torch.Tensor] = {}
        self._keep: list[tuple] = []

    def run(self, cand: Candidate, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b = cand.bounds[k.shape[-2]]
        key = (id(q), id(k), id(v), b, cand.block_k, cand.order, cand.merge if len(b) > 1 else None, cand.policy)
        out = self._out.get(key)
        if out is None:
            out = self._out[key] = cand.run(q, k, v)
            self._keep.append((q, k, v))
        return out


def _run(cand: Candidate, q, k, v, replays: Replays | None) -> torch.Tensor:
    return cand.run(q, k, v) if replays is None else replays.run(cand, q, k, v)


def policy_candidates(dtype: str) -> list[Policy]:
    """The policies tried, deduplicated by their arithmetic (names differ for the same arithmetic)."""
    f = get_format(dtype).name
    bases = [f"fa2:{f}", f"uniform:{f}", f"torch-eager:{f}", "fp32", f"fa2:{f},exp2=poly3"]
    out: dict[tuple, Policy] = {}

    def add(p: Policy) -> None:
        key = tuple(sorted((k, str(v)) for k, v in p.describe().items()))
        out.setdefault(key, p)

    named = []
    for spec in bases:
        base = parse_policy(spec)
        if base.inputs.name != f and spec == "fp32":
            base = base.with_overrides(inputs=f)  # the inputs site is the target's own dtype
        add(base)
        named.append(base)
    for base in named:  # the named policies first: fit() tries them alone before the variants
        for site in OBSERVED_SITES:
            for fmt in LOWERED:
                if getattr(base, site).name != get_format(fmt).name:
                    add(base.with_overrides(**{site: fmt}))
        add(base.with_overrides(normalize="divide" if base.normalize == "reciprocal" else "reciprocal"))
    return list(out.values())


def family_candidates(dtype: str) -> list[SumDecode]:
    """The element-wise Triton decode arithmetic in ``dtype``, with and without FP fusion."""
    f = get_format(dtype).name
    return [SumDecode(f, fused=True), SumDecode(f, fused=False)]


def pairs_with(policy, order: str, merge: str | None) -> bool:
    """Whether ``policy`` can run with this walk order and merge: the Triton decode family walks forward
    and merges its splits online, its own way."""
    return not isinstance(policy, SumDecode) or (order == "forward" and merge in (None, "online"))


def agrees(cand: Candidate, calls, replays: Replays | None = None) -> bool:
    """Whether ``cand`` reproduces every recorded call ((q, k, v, out)) bit for bit."""
    for q, k, v, out, *_ in calls:
        if not np.array_equal(bits(_run(cand, q, k, v, replays)), bits(out)):
            return False
    return True


def exact_fraction(cand: Candidate, calls, replays: Replays | None = None) -> tuple[float, float]:
    """(fraction of output elements bit-identical, largest residual in ulps of the output format)."""
    same = total = 0
    worst = 0.0
    for q, k, v, out, *_ in calls:
        with one_thread():  # the emulation's bits do not depend on the thread count
            mine = _run(cand, q, k, v, replays)
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

    for q, k, v, out, cols in records:
        n = len(cols.plus)
        mask = ~cross_split(cols, cand.bounds[k.shape[-2]])
        if not np.array_equal(survival(_run(cand, q, k, v, replays), n)[mask], survival(out, n)[mask]):
            return False
    return True


def survival_match(cand: Candidate, records, replays: Replays | None = None, floor: float = 0.0) -> float:
    """The fraction of all swamping probes (across splits too) in which ``cand`` lets e survive exactly
    when the target did: a structural score that hardly depends on the policy. Once the score cannot
    reach ``floor`` any more the replays stop, and a value below ``floor`` is returned."""
    total = sum(len(r[4].plus) for r in records)
    missed = 0
    for q, k, v, out, cols in records:
        n = len(cols.plus)
        missed += int((survival(_run(cand, q, k, v, replays), n) != survival(out, n)).sum())
        if missed > (1.0 - floor) * total:
            break
    return (total - missed) / total if total else 0.0


def structural(structures, bases, records, replays: Replays | None = None) -> list:
    """The structures that predict every known survival (:func:`structure.explains`) and whose replay
    under one of the ``bases`` shows the target's survivals within each split.

    Inside a tile the survivals are the tile's own summation order, which belongs to the arithmetic, not
    to the structure: attnum's tile matmul sums in whatever order the CPU's BLAS kernel does (MKL's
    AVX-512 sgemm blocks a 128-key tile's keys where its AVX2 path walks them one after another), the
    Triton decode family key after key. So a structure passes when any base arithmetic (one per family
    of the search) reproduces the survivals; a single base would make the answer depend on the CPU."""
    from attnum.audit.fingerprint.structure import explains

    keep = []
    with one_thread():  # the emulation's bits do not depend on the thread count
        for bounds, block_k, order in structures:
            if explains(records, bounds, block_k, order) and any(
                    same_survival(Candidate(bounds, block_k, order, "lse" if isinstance(b, Policy) else "online", b),
                                  records, replays)
                    for b in bases if pairs_with(b, order, "online")):
                keep.append((bounds, block_k, order))
    return keep


def found_for(bounds, block_k, order, merges, policies, fit_calls, probe_calls, replays) -> list[Candidate]:
    """The (merge, policy) candidates of one structure that reproduce the fitting and the probe calls."""
    split = any(len(b) > 1 for b in bounds.values())
    found: list[Candidate] = []
    for m in (merges if split else (None,)):
        pols = policies if not found else list({id(c.policy): c.policy for c in found}.values())
        found += [c for p in pols if pairs_with(p, order, m)
                  and agrees(c := Candidate(bounds, block_k, order, m, p), fit_calls, replays)
                  and agrees(c, probe_calls, replays)]
    return found


def fit(structures, merges, policies, fit_calls, probe_calls, replays: Replays | None = None) -> list[Candidate]:
    """Every (structure, merge, policy) reproducing the fitting calls, then the probe calls; the first
    structure with any wins. Merges are tried in turn; once one fits, the others are tried with the
    policies that fitted (policies and merge methods act on different steps). The later structures are
    then replayed under the policies that fitted: those that reproduce too are returned after the
    winner's candidates (the structure is undetermined: a split of a single tile, for one, can show
    only in its merge's last bits, which a 16-bit output may round away)."""
    with one_thread():  # the emulation's bits do not depend on the thread count
        for i, (bounds, block_k, order) in enumerate(structures):
            found = found_for(bounds, block_k, order, merges, policies, fit_calls, probe_calls, replays)
            if found:
                pols = list({id(c.policy): c.policy for c in found}.values())
                for other in structures[i + 1:]:
                    found += found_for(*other, merges, pols, fit_calls, probe_calls, replays)
                return found
    return []


def closeness(bounds: dict, block_k: int, order: str, policies, calls, replays: Replays | None = None) -> float:
    """The best fraction of bit-identical output elements over ``policies`` (merge ``lse``) on ``calls``:
    how near a structure comes before its policy is fitted."""
    best = 0.0
    for p in policies:
        best = max(best, exact_fraction(Candidate(bounds, block_k, order, "lse", p), calls, replays)[0])
    return best


def _site(p, site: str) -> str:
    return p.sites()[site] if isinstance(p, SumDecode) else getattr(p, site).name


def _knob(p, knob: str) -> str:
    if isinstance(p, SumDecode):
        return {"normalize": "divide", "exp2": "native", "tile": p.spec()}[knob]
    return "matmul" if knob == "tile" else str(getattr(p, knob))


def site_table(cands: list[Candidate]) -> dict[str, dict]:
    """site -> {format, determined, alternatives} over the exact candidates (their first as the answer);
    also the knobs normalize, exp2 and tile (attnum's tile matmuls, or the Triton decode family's)."""
    first = cands[0].policy
    table = {}
    for site in OBSERVED_SITES:
        names = sorted({_site(c.policy, site) for c in cands})
        table[site] = {"format": _site(first, site), "rounding": "nearest-even",
                       "determined": len(names) == 1, "alternatives": names}
    for knob in ("normalize", "exp2", "tile"):
        vals = sorted({_knob(c.policy, knob) for c in cands})
        table[knob] = {"format": _knob(first, knob), "determined": len(vals) == 1, "alternatives": vals}
    return table


def policy_spec(p: Policy | SumDecode) -> str:
    """A policy string that parses back to ``p``'s arithmetic (the Triton decode family: its name)."""
    if isinstance(p, SumDecode):
        return p.spec()
    base = p.name.split(",")[0]
    ref = parse_policy(base) if base else None
    over = []
    for site in OBSERVED_SITES + ("inputs",):
        if ref is None or getattr(ref, site) != getattr(p, site):
            over.append(f"{site}={getattr(p, site).name}")
    for knob in ("normalize", "exp2"):
        if ref is None or getattr(ref, knob) != getattr(p, knob):
            over.append(f"{knob}={getattr(p, knob)}")
    return ",".join([base or "fp32", *over])

