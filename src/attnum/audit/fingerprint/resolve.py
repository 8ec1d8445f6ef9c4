"""Telling undetermined choices apart: more calls of the target, on inputs the fitting did not use.

Candidates that reproduce every probe and fitting call can still differ elsewhere: normalisation by a
division or a reciprocal, the ``lse`` or ``online`` merge, a chain of tiles or the same tiles as splits
merged in order differ in fp32 last bits that a 16-bit output rounds away on most inputs, not on all.
:func:`resolve_calls` draws :data:`EXTRA_SEEDS` more seeds at every probed length and two magnitudes
(queries four times larger, values 2**10 times larger); :func:`resolve` keeps the candidates that
reproduce them too. What still agrees on every call stays undetermined: the same bits on every input
tried, which the document says.
"""

from __future__ import annotations

from attnum.audit.fingerprint.probes import Call, TargetRefused, random_inputs
from attnum.audit.fingerprint.search import agrees

EXTRA_SEEDS = 3


def plan(lengths, seed: int) -> str:
    """The extra calls in words (what ``--resolve`` runs)."""
    seeds = f"{seed + 10}..{seed + 9 + EXTRA_SEEDS}"
    return (f"{EXTRA_SEEDS * len(lengths) + 2} more calls of the target: seeds {seeds} of the fitting inputs at "
            f"S = {', '.join(map(str, lengths))}, and at S = {lengths[0]} queries x 4 and values x 2^10")


def resolve_calls(t, lengths, *, heads: int, d: int, dtype: str, seed: int, say=lambda _m: None) -> list[Call]:
    out = []
    for i in range(EXTRA_SEEDS):
        for S in lengths:
            q, k, v = random_inputs(S, heads=heads, d=d, dtype=dtype, seed=seed + 10 + i)
            if i == 0 and S == lengths[0]:
                for sq, sv in ((4.0, 1.0), (1.0, 2.0 ** 10)):
                    qs, vs = (q.double() * sq).to(q.dtype), (v.double() * sv).to(v.dtype)
                    say(f"resolve: q x {sq:g}, v x {sv:g} at S={S}")
                    try:
                        out.append(Call(qs, k, t(qs, k, vs), None, vs, dtype, what="resolve"))
                    except TargetRefused:
                        pass
            say(f"resolve: seed {seed + 10 + i} at S={S}")
            out.append(Call(q, k, t(q, k, v), None, v, dtype, what="resolve"))
    return out


def resolve(found: list, calls: list[Call], replays) -> list:
    """The candidates of ``found`` that reproduce every extra call too (the first stays first when kept)."""
    return [c for c in found if agrees(c, calls, replays)]
