"""Summation structure over keys from the swamping probes (:mod:`attnum.audit.fingerprint.probes`).

A *structure* is (Bc, span, order): keys are summed in tiles of Bc keys (global tile t = key // Bc),
each split of ``span`` keys (a whole number of tiles; None: one split) is one online-softmax chain over
its tiles walked ``forward`` or ``reverse``, and the splits' partial states are merged. Given a probe
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
        edges = np.asarray(starts, dtype=np.int64)
        sP, sM, sX = (np.searchsorted(edges, a, side="right") for a in (p, m, x))
    else:
        sp = span if span is not None else S
        sP, sM, sX = p // sp, m // sp, x // sp
    tP, tM, tX = p // block_k, m // block_k, x // block_k
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


def consistent(cols: SwampColumns, survived: np.ndarray, S: int, *, block_ks=None) -> dict[tuple, int]:
    """{(Bc, span, order): unknown count} for every structure agreeing with ``survived`` at S keys.

    Bc runs over 1 .. S (Bc = S: the whole key range in one tile) or ``block_ks``; span over None and
    every multiple of Bc below S."""
    obs = survived.astype(np.int8)
    found = {}
    for bc in (tile_candidates(cols, survived, S) if block_ks is None else block_ks):
        spans = [None] + list(range(bc, S, bc))
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
    one length give one candidate each."""
    lengths = sorted(per_length)
    keys = None
    for S in lengths:
        ks = {(bc, order) for bc, _, order in per_length[S]}
        keys = ks if keys is None else keys & ks
    joint = []
    for bc, order in keys or ():
        options = []
        for S in lengths:
            here = {span: u for (b, span, o), u in per_length[S].items() if b == bc and o == order}
            best = min(here.values())
            options.append([Structure(best, bc, span, order) for span, u in here.items() if u == best])
        for combo in itertools.islice(itertools.product(*options), 4):
            joint.append((sum(s.unknown for s in combo), bc, order, dict(zip(lengths, combo, strict=True))))
    joint.sort(key=lambda t: (t[0], t[1], t[2]))
    return [c for *_, c in joint[:limit]]


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
