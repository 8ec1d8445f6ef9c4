"""The cost of invariance: decode bound time of fixed split sizes against the batch-dependent heuristics.

For each scenario (B sequences of L keys, H heads, G kv heads, d head dim, bf16) each rule's plan
(:func:`attnum.attention.serving.split_rules.plan_splits`, with the device's SM count where the rule reads one)
gives the split count per sequence, and :func:`attnum.attention.cost.model.split_decode_time` its bound on A100, H100
and H200. ``ratio`` = time / the fa2 heuristic's time on that device (> 1: the rule is slower).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from attnum.attention.cost.model import DEVICES, CostConfig, split_decode_time
from attnum.attention.serving.split_rules import parse_split_rule, plan_splits

SCENARIOS = ((1, 1024), (1, 32768), (8, 4096), (64, 4096), (256, 1024))  # (B, L)
COST_RULES = ("fa2", "flashinfer:2048", "sglang-fixed:256", "vllm", "vllm-invariant", "count:1")


def cost_table(*, rules=COST_RULES, scenarios=SCENARIOS, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, devices=("A100", "H100", "H200")) -> list[dict[str, Any]]:
    """One row per (scenario, rule): splits per sequence and bound time (s) and ratio per device."""
    rows = []
    for B, L in scenarios:
        cfg = CostConfig(mode="decode", batch=B, heads=heads, kv_heads=kv_heads, kv_len=L, head_dim=head_dim)
        times: dict[str, dict[str, float | None]] = {}
        for rule in rules:
            r = parse_split_rule(rule)
            per_dev = {}
            for dev in devices:
                d = DEVICES[dev]
                rr = replace(r, sms=d.sms) if r.name in ("fa2", "sglang") else r
                plan = plan_splits(rr, lens=[L] * B, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
                splits = [sum(1 for j0, j1 in b if j1 > j0) for b in plan.bounds]
                per_dev[dev] = (split_decode_time(cfg, d, splits), splits[0])
            times[r.label] = per_dev
        base = times[parse_split_rule("fa2").label]
        for label, per_dev in times.items():
            rows.append({"B": B, "L": L, "rule": label,
                         "splits": {dev: s for dev, (_, s) in per_dev.items()},
                         "time_s": {dev: t for dev, (t, _) in per_dev.items()},
                         "ratio_vs_fa2": {dev: (t / base[dev][0]) if t and base[dev][0] else None
                                          for dev, (t, _) in per_dev.items()}})
    return rows
