"""Summation structure over keys from the swamping probes (:mod:`attnum.audit.fingerprint.probes`).

A *structure* is (Bc, span, order): each split of ``span`` keys (None: one split) is one online-softmax
chain over tiles of Bc keys counted from the split's start (the last one shorter when Bc does not
divide the span: vLLM's triton decode cuts ceil(S / n) keys per split and tiles each from its start),
walked ``forward`` or ``reverse``, and the splits' partial states are merged. Given a probe
(+M at p, -M at m, e at x), the structure predicts whether e survives:

- p and m in different splits: *unknown* (the split holding M or -M swamps an e of its own; an e in a
  third split meets M / L and -M / L' in the merge, whose rounding decides);
- p and m in one split s: e in another split survives; in s, with p and m in one tile, e in another
  tile survives (the tile's P V product is exactly 0 whenever it is added) and e in that same tile is
  *unknown* (the order of the tile's own matmul decides, which the structure does not model); with p
  and m in different tiles, e survives exactly when its tile is walked after both.

A structure may also say how a tile's keys are summed on a matrix unit (``group`` L > 0: an MMA adds
its products L at a time in K order, each group and the accumulator aligned to the largest term and
truncated, so e is dropped in a group that holds +M or -M or meets an M-sized accumulator; e is
M 2**-26, below every 16-bit MMA's F = 23 .. 25 fraction bits):

- ``chain`` (FA2/FA3, Triton's ``tl.dot(p, v, acc)``): O is the MMA's accumulator, so the groups of every
  tile form one chain in walk order (tiles in ``order``, groups inside a tile forward): e survives
  exactly when its group comes after both M's. A tile then shows only through a reverse walk: walked
  forward, every tile that is a multiple of L swamps alike (it is read from the fitting inputs);
- not ``chain`` (each tile's product from zero, then added): as above between tiles, and inside the
  tile of p and m, e survives exactly when its group comes after both.

:func:`consistent` lists every structure whose predictions agree with the observed survivals on every
known probe, ranked by the number of probes left unknown (fewest first: the structure that explains
the most). The ranking only proposes; the candidates are confirmed by replaying the probes through
attnum's emulation (:mod:`attnum.audit.fingerprint.search`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from attnum.audit.fingerprint.probes import SwampColumns

ORDERS = ("forward", "reverse")


@dataclass(frozen=True, order=True)
class Structure:
    """``unknown`` first so that sorting ranks by it. ``span`` None: a single chain (no split). ``group``:
    the MMA's group size L (0: the tile's own order is not modelled); ``chain``: the accumulator runs
    through the MMA chain (module doc)."""

    unknown: int
    block_k: int
    span: int | None
    order: str
    group: int = 0
    chain: bool = False

    @property
    def hypothesis(self) -> tuple:
        """(Bc, order, group, chain): what stays the same at every length."""
        return (self.block_k, self.order, self.group, self.chain)

    def bounds(self, S: int) -> tuple[tuple[int, int], ...]:
        """The key ranges [j0, j1) of the live splits at S keys."""
        if self.span is None or self.span >= S:
            return ((0, S),)
        return tuple((j0, min(S, j0 + self.span)) for j0 in range(0, S, self.span))


def predict(cols: SwampColumns, *, block_k: int, span: int | None, order: str, S: int,
            starts: tuple[int, ...] | None = None, group: int = 0, chain: bool = False) -> np.ndarray:
    """Per probe: 1 e survives, 0 swamped, -1 unknown (module doc). Splits every ``span`` keys, or
    starting at ``starts`` (besides 0) when given; ``group`` and ``chain``: the MMA's summation inside
    a tile (module doc)."""
    p, m, x = cols.plus, cols.minus, cols.epos
    if starts is not None:
        edges = np.asarray((0, *starts), dtype=np.int64)
        sP, sM, sX = (np.searchsorted(edges, a, side="right") - 1 for a in (p, m, x))
        oP, oM, oX = edges[sP], edges[sM], edges[sX]
    else:
        sp = span if span is not None else S
        sP, sM, sX = p // sp, m // sp, x // sp
        oP, oM, oX = sP * sp, sM * sp, sX * sp
    tP, tM, tX = (p - oP) // block_k, (m - oM) // block_k, (x - oX) // block_k  # tiles from the split's start
    sign = 1 if order == "forward" else -1
    rP, rM, rX = sign * tP, sign * tM, sign * tX
    out = np.zeros(len(p), dtype=np.int8)
    same_split = sP == sM
    out[~same_split] = -1  # the merge's own rounding of M and -M decides (e is usually swamped there)
    other = same_split & (sX != sP)
    out[other] = 1
    inside = same_split & (sX == sP)
    one_tile = inside & (tP == tM)
    if group:  # units: the MMA's groups, walked tile by tile, forward inside a tile
        G = -(-block_k // group)
        uP, uM, uX = (r * G + (a - o) % block_k // group for r, a, o in ((rP, p, oP), (rM, m, oM), (rX, x, oX)))
        after = uX > np.maximum(uP, uM)
        if chain:
            out[inside] = after[inside]
            return out
        out[one_tile & (tX != tP)] = 1
        out[one_tile & (tX == tP)] = after[one_tile & (tX == tP)]
    else:
        out[one_tile & (tX != tP)] = 1
        out[one_tile & (tX == tP)] = -1
    two = inside & (tP != tM)
    out[two] = (rX > np.maximum(rP, rM))[two]
    return out


def tile_candidates(cols: SwampColumns, survived: np.ndarray, S: int) -> list[int]:
    """The Bc worth testing. Every structure predicts a known survival at the probe whose -M closes the
    first tile walked after +M's (forward family: -M at Bc - 1, e at Bc; reverse family: -M at the
    last tile's start, e just before it), so only a Bc whose probe survived can be consistent; Bc >= S - 1
    (no such probe) is always kept."""
    fwd = set((cols.minus[survived & (cols.plus == 0)] + 1).tolist())
    rev = set(cols.minus[survived & (cols.plus == S - 1)].tolist())
    keep = [bc for bc in range(1, S - 1) if bc in fwd or (S - 1) // bc * bc in rev]
    return sorted({1, *keep, S - 1, S})


def cut_spans(S: int, most: int = 64) -> set[int]:
    """Split sizes below S of the cuts that are not whole tiles: ceil(S / n) (vLLM's and LightLLM's triton
    decode) and ceil(ceil(S / n) / a) a for a = 16, 32, 64 (SGLang: a = 32), n = 2 .. ``most``."""
    out = set()
    for n in range(2, most + 1):
        per = -(-S // n)
        out |= {per, *(-(-per // a) * a for a in (16, 32, 64))}
    return {s for s in out if 0 < s < S}


def variants(block_k: int, order: str, groups: tuple[int, ...]) -> list[tuple[int, bool]]:
    """The (group, chain) summations a tile of ``block_k`` keys walked in ``order`` is tried with: the
    tile's own order left open (0, False), and for each MMA group size L dividing it, the products from
    zero per tile and the chained accumulator. A forward chain swamps alike for every tile that is a
    multiple of L, so it is listed once, at Bc = L (the tile is read from the fitting inputs)."""
    out = [(0, False)]
    for L in groups:
        if block_k % L == 0:
            out.append((L, False))
            if order == "reverse" or block_k == L:
                out.append((L, True))
    return out


def consistent(cols: SwampColumns, survived: np.ndarray, S: int, *, block_ks=None,
               groups: tuple[int, ...] = ()) -> dict[tuple, int]:
    """{(Bc, span, order, group, chain): unknown count} for every structure agreeing with ``survived``
    at S keys.

    Bc runs over 1 .. S (Bc = S: the whole key range in one tile) or ``block_ks``; span over None, every
    multiple of Bc below S, and, for a Bc that is a multiple of 16 (the tiles of GPU kernels: Triton's
    BLOCK_N is a power of 2 >= 16), the split sizes of :func:`cut_spans`; (group, chain) over
    :func:`variants` with the MMA group sizes ``groups``. A structure that leaves every probe unknown
    (every key a split of its own) agrees with anything and is left out."""
    keep = cols.modelled()
    cols, obs = cols[keep], survived[keep].astype(np.int8)
    survived = survived[keep]
    found = {}
    cuts = cut_spans(S)
    for bc in (tile_candidates(cols, survived, S) if block_ks is None else block_ks):
        spans = [None] + sorted(set(range(bc, S, bc)) | (cuts if bc % 16 == 0 else set()))
        for order in ORDERS:
            for group, chain in variants(bc, order, groups):
                for span in spans:
                    if group and span is not None and span % group:
                        continue  # a split that cuts an MMA group is no kernel's
                    pred = predict(cols, block_k=bc, span=span, order=order, S=S, group=group, chain=chain)
                    known = pred >= 0
                    if known.any() and np.array_equal(pred[known], obs[known]):  # one that predicts nothing: no evidence
                        found[(bc, span, order, group, chain)] = int((~known).sum())
    return found


def rank(per_length: dict[int, dict[tuple, int]], limit: int = 12) -> list[dict[int, Structure]]:
    """Joint candidates over the probed lengths: one hypothesis (Bc, order, group, chain) for every length
    (the span may change with the length: that is the split rule), ranked by the total unknown count;
    spans tied at one length give one candidate each (up to 4 per hypothesis), for the best ``limit``."""
    lengths = sorted(per_length)
    # A tile at least as long as its split is the whole split, whatever its length: (Bc', span) with
    # Bc' >= span predicts as (Bc, span) for every Bc >= span. A length where the splits are shorter
    # than the tile cannot show the tile, so it must not veto it.
    whole = {S: {(span, o, g, c): u for (b, span, o, g, c), u in per_length[S].items() if span is not None and b >= span}
             for S in lengths}
    every = {(bc, order, g, c) for S in lengths for bc, _, order, g, c in per_length[S]}

    def here_at(S, hyp):
        bc, order, g, c = hyp
        here = {span: u for (b, span, o, gg, cc), u in per_length[S].items() if (b, o, gg, cc) == hyp}
        for (span, o, gg, cc), u in whole[S].items():
            if (o, gg, cc) == (order, g, c) and bc >= span and span not in here:
                here[span] = u
        return here

    joint = []
    for hyp in every:
        options = []
        for S in lengths:
            here = here_at(S, hyp)
            if not here:
                break
            best = min(here.values())
            options.append([Structure(best, hyp[0], span, hyp[1], hyp[2], hyp[3]) for span, u in here.items()
                            if u == best])
        if len(options) < len(lengths):
            continue
        for combo in itertools.islice(itertools.product(*options), 4):
            joint.append((sum(s.unknown for s in combo), hyp, dict(zip(lengths, combo, strict=True))))
    joint.sort(key=lambda t: (t[0], t[1][0], t[1][1], t[1][2], t[1][3]))
    hyps: set[tuple] = set()
    out = []
    for _u, hyp, c in joint:  # the best-ranked ``limit`` hypotheses, each with its span choices
        if hyp not in hyps and len(hyps) == limit:
            continue
        hyps.add(hyp)
        out.append(c)
    return out


def boundaries(starts: np.ndarray, survived: np.ndarray) -> tuple[int, ...]:
    """Split starts from the boundary probes (:func:`attnum.audit.fingerprint.probes.boundary_columns`):
    the candidate tile starts b whose e survived."""
    return tuple(int(b) for b, s in zip(starts, survived, strict=True) if s)


def split_bounds(S: int, starts: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The key ranges of the splits that start at 0 and at ``starts``."""
    edges = [0, *starts, S]
    return tuple((a, b) for a, b in zip(edges, edges[1:], strict=False))


def explains(records, bounds: dict, block_k: int, order: str, group: int = 0, chain: bool = False) -> bool:
    """Whether the structure with split ranges ``bounds`` ({S: ranges}) predicts every known survival of
    the recorded probe calls (:class:`attnum.audit.fingerprint.probes.Call` with columns)."""
    from attnum.audit.fingerprint.probes import modelled_survival

    for rec in records:
        S = rec.S
        starts = tuple(j0 for j0, _ in bounds[S][1:])
        cols, surv = modelled_survival(rec)
        pred = predict(cols, block_k=block_k, span=None, order=order, S=S, starts=starts, group=group, chain=chain)
        obs = surv.astype(np.int8)
        known = pred >= 0
        if not np.array_equal(pred[known], obs[known]):
            return False
    return True


def cross_split(cols: SwampColumns, bounds: tuple) -> np.ndarray:
    """(n,) whether a probe's +M and -M lie in different splits (its survival is the merge's)."""
    edges = np.asarray([j0 for j0, _ in bounds[1:]], dtype=np.int64)
    return np.searchsorted(edges, cols.plus, side="right") != np.searchsorted(edges, cols.minus, side="right")
