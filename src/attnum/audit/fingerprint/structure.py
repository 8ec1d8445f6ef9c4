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
    """``unknown`` first so that sorting ranks by it. ``span`` None: a single chain (no split)."""

    unknown: int
    block_k: int
    span: int | None
    order: str

    def bounds(self, S: int) -> tuple[tuple[int, int], ...]:
        """The key ranges [j0, j1) of the live splits at S keys."""
        if self.span is None or self.span >= S:
            return ((0, S),)
        return tuple((j0, min(S, j0 + self.span)) for j0 in range(0, S, self.span))


def predict(cols: SwampColumns, *, block_k: int, span: int | None, order: str, S: int,
            starts: tuple[int, ...] | None = None) -> np.ndarray:
    """Per probe: 1 e survives, 0 swamped, -1 unknown (module doc). Splits every ``span`` keys, or
    starting at ``starts`` (besides 0) when given."""
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


def consistent(cols: SwampColumns, survived: np.ndarray, S: int, *, block_ks=None) -> dict[tuple, int]:
    """{(Bc, span, order): unknown count} for every structure agreeing with ``survived`` at S keys.

    Bc runs over 1 .. S (Bc = S: the whole key range in one tile) or ``block_ks``; span over None, every
    multiple of Bc below S, and, for a Bc that is a multiple of 16 (the tiles of GPU kernels: Triton's
    BLOCK_N is a power of 2 >= 16), the split sizes of :func:`cut_spans`."""
    obs = survived.astype(np.int8)
    found = {}
    cuts = cut_spans(S)
    for bc in (tile_candidates(cols, survived, S) if block_ks is None else block_ks):
        spans = [None] + sorted(set(range(bc, S, bc)) | (cuts if bc % 16 == 0 else set()))
        for span in spans:
            for order in ORDERS:
                pred = predict(cols, block_k=bc, span=span, order=order, S=S)
                known = pred >= 0
                if np.array_equal(pred[known], obs[known]):
                    found[(bc, span, order)] = int((~known).sum())
    return found


def rank(per_length: dict[int, dict[tuple, int]], limit: int = 12) -> list[dict[int, Structure]]:
    """Joint candidates over the probed lengths: one Bc and one order for every length (the span may
    change with the length: that is the split rule), ranked by the total unknown count; spans tied at
    one length give one candidate each (up to 4 per pair), for the best ``limit`` (Bc, order) pairs."""
    lengths = sorted(per_length)
    # A tile at least as long as its split is the whole split, whatever its length: (Bc', span) with
    # Bc' >= span predicts as (Bc, span) for every Bc >= span. A length where the splits are shorter
    # than the tile cannot show the tile, so it must not veto it.
    whole = {S: {(span, o): u for (b, span, o), u in per_length[S].items() if span is not None and b >= span}
             for S in lengths}
    every = {(bc, order) for S in lengths for bc, _, order in per_length[S]}
    keys = {(bc, order) for bc, order in every
            if all(any(b == bc and o == order for b, _, o in per_length[S])
                   or any(o == order and bc >= span for span, o in whole[S]) for S in lengths)}
    joint = []
    for bc, order in keys:
        options = []
        for S in lengths:
            here = {span: u for (b, span, o), u in per_length[S].items() if b == bc and o == order}
            for (span, o), u in whole[S].items():
                if o == order and bc >= span and span not in here:
                    here[span] = u
            best = min(here.values())
            options.append([Structure(best, bc, span, order) for span, u in here.items() if u == best])
        for combo in itertools.islice(itertools.product(*options), 4):
            joint.append((sum(s.unknown for s in combo), bc, order, dict(zip(lengths, combo, strict=True))))
    joint.sort(key=lambda t: (t[0], t[1], t[2]))
    pairs: set[tuple] = set()
    out = []
    for _u, bc, order, c in joint:  # the best-ranked ``limit`` (Bc, order) pairs, each with its span choices
        if (bc, order) not in pairs and len(pairs) == limit:
            continue
        pairs.add((bc, order))
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


def explains(records, bounds: dict, block_k: int, order: str) -> bool:
    """Whether the structure with split ranges ``bounds`` ({S: ranges}) predicts every known survival of
    the recorded probe calls ((q, k, v, out, columns))."""
    from attnum.audit.fingerprint.probes import survival

    for _q, k, _v, out, cols in records:
        S = k.shape[-2]
        starts = tuple(j0 for j0, _ in bounds[S][1:])
        pred = predict(cols, block_k=block_k, span=None, order=order, S=S, starts=starts)
        obs = survival(out, len(cols.plus)).astype(np.int8)
        known = pred >= 0
        if not np.array_equal(pred[known], obs[known]):
            return False
    return True


def cross_split(cols: SwampColumns, bounds: tuple) -> np.ndarray:
    """(n,) whether a probe's +M and -M lie in different splits (its survival is the merge's)."""
    edges = np.asarray([j0 for j0, _ in bounds[1:]], dtype=np.int64)
    return np.searchsorted(edges, cols.plus, side="right") != np.searchsorted(edges, cols.minus, side="right")
