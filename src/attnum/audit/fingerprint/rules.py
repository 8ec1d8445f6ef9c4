"""Which split rules of :mod:`attnum.attention.serving.split_rules` give the splits a fingerprint found.

A rule matches when, at every probed length S (B = 1 sequence, H heads = kv heads, one query), its
plan's non-empty key ranges are the fingerprint's split ranges (empty splits merge as the identity,
so they leave no trace in the outputs). The tile and the walk order are compared too; a rule that
matches the cut but not the tile is listed with that difference.

A rule picks the split count; a kernel asked for a count (``--num-splits``) only cuts. :func:`matching_cuts`
names the cuts that give the found ranges from the found count at every length.
"""

from __future__ import annotations

from attnum.attention.serving.split_rules import fa2_cut, plan_splits, sglang_cut

CUTS = {
    "sglang": "ceil(ceil(S / n) / 32) * 32 keys per split (SGLang's decode_attention.py)",
    "even": "ceil(S / n) keys per split (vLLM's and LightLLM's triton decode kernels)",
    "fa2": "ceil(ceil(S / 128) / n) blocks of 128 keys per split (FlashAttention-2's split-KV)",
}


def _cut(name: str, S: int, n: int) -> tuple:
    if name == "sglang":
        ranges = sglang_cut(S, n)
    elif name == "fa2":
        ranges = fa2_cut(S, num_splits=n, max_seqlen=S, block_n=128)
    else:
        per = -(-S // n)
        ranges = tuple((s * per, min((s + 1) * per, S)) for s in range(n))
    return tuple((j0, j1) for j0, j1 in ranges if j1 > j0)


def matching_cuts(bounds: dict) -> list[str]:
    """The names of :data:`CUTS` that give ``bounds`` ({S: ranges}) from its split count at every length
    where the sequence is split (none when no length is)."""
    split = {S: tuple(map(tuple, r)) for S, r in bounds.items() if len(r) > 1}
    if not split:
        return []
    return [name for name in CUTS
            if all(any(_cut(name, S, n) == r for n in range(len(r), 2 * len(r) + 1)) for S, r in split.items())]


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
