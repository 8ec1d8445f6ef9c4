"""The check of an answer on inputs the search never saw: other seeds, other magnitudes, another length.

A candidate fitted on the fitting inputs and the probes can still be wrong where neither reached: a
kernel whose arithmetic depends on the data (fp32 scores while the queries are small, bf16 above) fits
mild inputs exactly. So the fresh calls (:func:`fresh_calls`) span what the fitting inputs did not:

- the fitting inputs' recipe with another seed, at every probed length;
- at the shortest probed length, in the same call, heads whose queries are four and sixteen times
  larger or sixteen times smaller (``q x 4``, ``q x 16``, ``q x 1/16``: scores up to sixteen times wider,
  the softmax nearly one-hot, exp near underflow; or nearly flat) and heads whose values are 2**10 and
  2**-10 times larger (``v x 2^10``, ``v x 2^-10``: the accumulator's exponent range), the variants
  cycling over the heads (a kernel that switches its arithmetic on the call's data switches it for every
  head: the replay differs either way). The fitting inputs span less (:data:`probes.FIT_MAGNITUDES`);
- ``S=...``: a length that was not probed (twice the shortest), when the answer says what the
  kernel does there (:func:`at_length`: one split at every probed length); otherwise the document says
  it was not checked and why.

A target that refuses an input (NotImplementedError) has that check left out, with the reason.
"""

from __future__ import annotations

import torch

from attnum.audit.fingerprint.families import EagerOps, Untiled
from attnum.audit.fingerprint.probes import MAX_LENGTH, Call, TargetRefused, bits, magnitude_inputs, random_inputs
from attnum.audit.fingerprint.search import Candidate, Skipped
from attnum.numerics.formats import format_of_dtype
from attnum.numerics.metrics import ulp
from attnum.numerics.threads import one_thread

MAGNITUDES = (("seed", 1.0, 1.0), ("q x 4", 4.0, 1.0), ("q x 16", 16.0, 1.0), ("q x 1/16", 1 / 16, 1.0),
              ("v x 2^10", 1.0, 2.0 ** 10), ("v x 2^-10", 1.0, 2.0 ** -10))


def fresh_inputs(lengths, *, heads: int, d: int, dtype: str, seed: int) -> list[tuple[list[str], tuple]]:
    """[(per-head labels, (q, k, v))] of the fresh calls (module doc), the unprobed length last."""
    out = [magnitude_inputs(lengths[0], heads=heads, d=d, dtype=dtype, seed=seed, variants=MAGNITUDES)]
    for S in lengths[1:]:
        out.append(([f"seed {seed} at S={S}"] * heads, random_inputs(S, heads=heads, d=d, dtype=dtype, seed=seed)))
    S1 = 2 * lengths[0]
    if S1 not in lengths and S1 <= MAX_LENGTH[dtype]:
        out.append(([f"unprobed length S={S1}"] * heads, random_inputs(S1, heads=heads, d=d, dtype=dtype, seed=seed)))
    return out


def at_length(best: Candidate, S: int) -> tuple | None:
    """The split ranges ``best`` has at an unprobed length S: one range when it has one at every probed
    length; else None. A split rule that cut alike at the probed lengths is not evidence of the cut
    elsewhere (``sglang-fixed:128`` and ``sglang-fixed:160`` cut S = 200 and 500 alike, not 400)."""
    if all(len(b) == 1 for b in best.bounds.values()):
        return ((0, S),)
    return None


def fresh_calls(t, lengths, *, heads: int, d: int, dtype: str, seed: int, say=lambda _m: None
                ) -> tuple[list[tuple[list[str], Call]], list[str]]:
    """The target's outputs on :func:`fresh_inputs`: ([(per-head labels, Call)], [checks left out, with why])."""
    calls, left = [], []
    for labels, (q, k, v) in fresh_inputs(lengths, heads=heads, d=d, dtype=dtype, seed=seed):
        what = ", ".join(dict.fromkeys(labels))
        say(f"fresh inputs: {what}")
        try:
            out = t(q, k, v)
        except TargetRefused as exc:
            left.append(f"{what}: the target refused it ({exc})")
            continue
        calls.append((labels, Call(q, k, out, None, v, dtype, what=what)))
    return calls, left


def check(best: Candidate, calls: list[tuple[list[str], Call]], replays) -> tuple[float, float, list[dict], list[str]]:
    """(bit-exact fraction over every fresh call, largest residual in ulps of the output format, per
    check {inputs, S, bit_exact_fraction, residual_ulp}, checks left out with why)."""
    rows: dict[str, dict] = {}
    left: list[str] = []
    for labels, call in calls:
        cand = best
        if call.S not in best.bounds and not isinstance(best.policy, (Untiled, EagerOps)):
            ranges = at_length(best, call.S)
            if ranges is None:
                left.append(f"{call.what}: not checked, the split ranges there are unknown (they are read at the "
                            "probed lengths only)")
                continue
            cand = best.with_bounds(call.S, ranges)
        try:
            with one_thread():  # the emulation's bits do not depend on the thread count
                mine = replays.run(cand, call)
        except Skipped:
            left.append(f"{call.what}: its replay was skipped (memory budget)")
            continue
        H = call.out.shape[1]
        eq = torch.from_numpy(bits(mine) == bits(call.out)).reshape(H, -1)
        a, b = mine.double().reshape(H, -1), call.out.double().reshape(H, -1)
        r = (a - b).abs() / ulp(b, format_of_dtype(call.out.dtype))
        for h, label in enumerate(labels):
            row = rows.setdefault(label, {"inputs": label, "S": call.S, "same": 0, "total": 0, "worst": 0.0})
            row["same"] += int(eq[h].sum())
            row["total"] += eq[h].numel()
            bad = r[h][~eq[h]]
            if bad.numel():
                row["worst"] = max(row["worst"], float(bad.max()) if torch.isfinite(bad).all() else float("inf"))
    out = [{"inputs": r["inputs"], "S": r["S"], "bit_exact_fraction": r["same"] / r["total"],
            "residual_ulp": r["worst"]} for r in rows.values()]
    same, total = sum(r["same"] for r in rows.values()), sum(r["total"] for r in rows.values())
    return (same / total if total else 0.0), max((r["worst"] for r in rows.values()), default=0.0), out, left
