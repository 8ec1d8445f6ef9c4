"""Which split rules of :mod:`attnum.attention.split_rules` give the splits a fingerprint found.

A rule matches when, at every probed length S (B = 1 sequence, H heads = kv heads, one query), its
plan's non-empty key ranges are the fingerprint's split ranges (empty splits merge as the identity,
so they leave no trace in the outputs). The tile and the walk order are compared too; a rule that
matches the cut but not the tile is listed with that difference.
"""

from __future__ import annotations

from attnum.attention.split_rules import plan_splits


def _rules(bounds: dict) -> list[str]:
    rules = [f"count:{n}" for n in range(1, 33)] + ["fa2", "fa2:sms=108", "sglang", "vllm", "vllm-invariant"]
    if any(len(b) > 1 for b in bounds.values()):  # a split size is only seen where a sequence is split
        spans = sorted({b[0][1] - b[0][0] for b in bounds.values() if len(b) > 1})
        rules += [f"flashinfer:{s}" for s in spans] + [f"sglang-fixed:{s}" for s in spans]
    return rules


def matching_rules(bounds: dict, block_k: int, order: str, *, heads: int, d: int) -> list[dict]:
    """[{rule, tile_matches}] for every rule whose cut equals ``bounds`` ({S: ranges}) at each length."""
    out = []
    for rule in _rules(bounds):
        ok, tile_ok = True, True
        for S, ranges in bounds.items():
            plan = plan_splits(rule, lens=[S], heads=heads, kv_heads=heads, head_dim=d, queries=1)
            live = tuple((j0, j1) for j0, j1 in plan.bounds[0] if j1 > j0)
            if live != tuple(ranges):
                ok = False
                break
            tile_ok = tile_ok and plan.block_k == block_k and plan.kv_order == order
        if ok:
            out.append({"rule": rule, "tile_matches": tile_ok})
    # count:N rules that cut alike: keep the smallest N (larger ones only add empty splits)
    seen, kept = set(), []
    for m in out:
        key = (m["rule"].split(":")[0], m["tile_matches"])
        if m["rule"].startswith("count:") and key in seen:
            continue
        seen.add(key)
        kept.append(m)
    return kept
