"""One request under every way a server computes its attention, against itself alone and float64.

Shape alphabet: H query heads, G kv heads, T the request's length, d head dim; one request (B = 1).

Ways (each gives the request's output rows (H, d) at the config's query positions t):

- ``prefill``: one causal pass over all T tokens (:func:`attnum.attention.flash.flash_attention`,
  Bc = 128), the training-side way;
- ``chunked:C``: chunked prefill, chunk c's queries against the cache up to its end
  (:func:`attnum.attention.serving.decode.decode_attention` with N = C queries, bottom-right causal);
- ``paged:P``: a decode step on a paged cache of P-token pages, tiled by page (B = 1, unsplit);
- ``decode`` under each split rule, alone (B = 1) and inside batches: B - 1 other requests of lengths
  drawn as :meth:`ConsistencyConfig.co_lengths` says. The other requests change only the rule's plan
  (:func:`attnum.attention.serving.split_rules.plan_splits` of the whole batch); the request's arithmetic
  then depends on its own ranges alone, so only its row is computed (bit-identical to computing the
  whole batch: a sequence's partials never read another's).

Knobs (attribution, one at a time from the request alone, as ``attnum attribute`` turns on one rounding
site at a time): ``batch_size`` (B copies of the request's own length), ``co_lengths`` (one other
request of a drawn length, B = 2), and for prefill vs decode ``query_block`` (decode N = 1 vs the prefill
pass, same tile, no split) and ``split`` (the rule's split and tile vs one split at the prefill's tile).
Distances are in ulps of the output format at the scale of each reference row (:func:`max_ulp`).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from attnum.attention.baseline import baseline_attention
from attnum.attention.flash import flash_attention
from attnum.attention.golden import golden_attention
from attnum.attention.serving.decode import decode_attention
from attnum.attention.serving.paged import paged_decode_attention, to_pages
from attnum.attention.serving.split_rules import parse_split_rule, plan_splits
from attnum.numerics.metrics import ulp
from attnum.numerics.policy import parse_policy
from attnum.numerics.rounding import round_to
from attnum.numerics.threads import one_thread  # tiny tensors: one thread (a 2-thread pool waits on a busy machine)
from attnum.studies.consistency.config import ConsistencyConfig
from attnum.workloads.inputs import InputSpec, make_qkv


def max_ulp(x: torch.Tensor, ref: torch.Tensor, fmt) -> float:
    """max |x - ref| in ulps of ``fmt`` at each row's scale, max |ref| over the row's last dimension
    (an element near 0 would otherwise count its error in ulps of a tiny number); 0 when identical."""
    x, ref = x.double(), ref.double()
    scale = ref.abs().amax(dim=-1, keepdim=True)
    return float(((x - ref).abs() / ulp(scale, fmt)).max())


def _summary(pairs: list[tuple[torch.Tensor, torch.Tensor]], fmt) -> dict[str, Any]:
    same = [bool(torch.equal(a, b)) for a, b in pairs]
    return {"n": len(pairs), "identical": sum(same) / max(1, len(same)),
            "max_ulp": max((max_ulp(a, b, fmt) for a, b in pairs), default=0.0)}


class Request:
    """The request's q (1, H, T, d), k, v (1, G, T, d) on the policy's input grid, and what it yields."""

    def __init__(self, cfg: ConsistencyConfig):
        self.cfg, self.policy = cfg, parse_policy(cfg.policy)
        spec = InputSpec(batch=1, heads=cfg.heads, kv_heads=cfg.kv_heads, seq_len=cfg.length, kv_len=cfg.length,
                         head_dim=cfg.head_dim, seed=cfg.seed)
        self.q, self.k, self.v = (round_to(x, self.policy.inputs).to(cfg.device) for x in make_qkv(spec))
        self.fmt = self.policy.out
        self._memo: dict = {}

    def golden(self, t: int) -> torch.Tensor:
        return golden_attention(self.q[:, :, t:t + 1], self.k[:, :, :t + 1], self.v[:, :, :t + 1])[0, :, 0]

    def baseline(self, t: int) -> torch.Tensor:
        """(H, d): plain same-precision attention of row t (the yardstick of FlashAttention's test rule)."""
        return baseline_attention(self.q[:, :, t:t + 1], self.k[:, :, :t + 1], self.v[:, :, :t + 1],
                                  policy=self.policy)[0, :, 0]

    def prefill(self) -> torch.Tensor:
        """(H, T, d): one causal pass."""
        if "prefill" not in self._memo:
            self._memo["prefill"] = flash_attention(self.q, self.k, self.v, is_causal=True, policy=self.policy,
                                                    block_k=128)[0]
        return self._memo["prefill"]

    def decode(self, t: int, plan) -> torch.Tensor:
        """(H, d): the decode step at position t under a one-sequence plan (memoised by its ranges)."""
        key = ("decode", t, plan.bounds, plan.block_k, plan.merge_method)
        if key not in self._memo:
            self._memo[key] = decode_attention(self.q[:, :, t:t + 1], self.k[:, :, :t + 1], self.v[:, :, :t + 1],
                                               policy=self.policy, split_rule=plan)[0, :, 0]
        return self._memo[key]

    def plan(self, rule: str, t: int, co_lens: list[int]):
        return plan_splits(rule, lens=[t + 1, *co_lens], heads=self.cfg.heads, kv_heads=self.cfg.kv_heads,
                           head_dim=self.cfg.head_dim).select([0])

    def chunked(self, t: int, C: int) -> torch.Tensor:
        c0 = (t // C) * C
        c1 = min(c0 + C, self.cfg.length)
        key = ("chunk", C, c0)
        if key not in self._memo:
            self._memo[key] = decode_attention(self.q[:, :, c0:c1], self.k[:, :, :c1], self.v[:, :, :c1],
                                               policy=self.policy)[0]
        return self._memo[key][:, t - c0]

    def paged(self, t: int, P: int) -> torch.Tensor:
        lens, dev = torch.tensor([t + 1]), self.q.device
        kp, table = to_pages(self.k[:, :, :t + 1].cpu(), P, cache_seqlens=lens, seed=self.cfg.seed)
        vp, _ = to_pages(self.v[:, :, :t + 1].cpu(), P, cache_seqlens=lens, seed=self.cfg.seed)
        return paged_decode_attention(self.q[:, :, t:t + 1], kp.to(dev), vp.to(dev), block_table=table.to(dev),
                                      cache_seqlens=lens.to(dev), policy=self.policy)[0, :, 0]


def _rule_study(req: Request, rule: str, ts: list[int]) -> dict[str, Any]:
    cfg, fmt = req.cfg, req.fmt
    alone = {t: req.decode(t, req.plan(rule, t, [])) for t in ts}
    golden = {t: req.golden(t) for t in ts}
    by_batch, notes = [], {}
    for B in cfg.batch_sizes:
        pairs = []
        for mix in range(cfg.mixes if B > 1 else 1):
            co = cfg.co_lengths(B, mix)
            for t in ts:
                plan = req.plan(rule, t, co)
                notes.setdefault(B, plan.note)
                pairs.append((req.decode(t, plan), alone[t]))
        by_batch.append({"B": B, **_summary(pairs, fmt), "plan": notes[B]})
    knobs = {
        "batch_size": _summary([(req.decode(t, req.plan(rule, t, [t + 1] * (B - 1))), alone[t])
                                for B in cfg.batch_sizes if B > 1 for t in ts], fmt),
        "co_lengths": _summary([(req.decode(t, req.plan(rule, t, cfg.co_lengths(2, m))), alone[t])
                                for m in range(cfg.mixes) for t in ts], fmt),
    }
    unsplit = {t: req.decode(t, plan_splits("count:1", lens=[t + 1], heads=cfg.heads, kv_heads=cfg.kv_heads,
                                            head_dim=cfg.head_dim)) for t in ts}
    pre = req.prefill()
    return {
        "rule": rule, "batch_invariant_by_construction": parse_split_rule(rule).batch_invariant,
        "alone_vs_golden_ulp": max(max_ulp(alone[t], golden[t], fmt) for t in ts),
        "batches": by_batch, "knobs": knobs,
        "breaks": [k for k, s in knobs.items() if s["identical"] < 1.0],
        "decode_vs_prefill": _summary([(alone[t], pre[:, t]) for t in ts], fmt),
        "prefill_knobs": {"query_block": _summary([(unsplit[t], pre[:, t]) for t in ts], fmt),
                          "split": _summary([(alone[t], unsplit[t]) for t in ts], fmt)},
    }


def run_consistency(cfg: ConsistencyConfig) -> dict[str, Any]:
    """The study of one point -> {"config", "rules": [...], "modes": [...], "timing_s"} (JSON-able).
    Refused (one line) before anything is allocated when it would not fit in memory here."""
    cfg.require_memory()
    with one_thread():
        return _run(cfg)


def _run(cfg: ConsistencyConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    req = Request(cfg)
    ts = cfg.query_positions()
    fmt = req.fmt
    pre = req.prefill()
    golden = {t: req.golden(t) for t in ts}
    baseline_ulp = max(max_ulp(req.baseline(t), golden[t], fmt) for t in ts)
    modes = [{"mode": "prefill", "vs_prefill": _summary([(pre[:, t], pre[:, t]) for t in ts], fmt),
              "vs_golden_ulp": max(max_ulp(pre[:, t], golden[t], fmt) for t in ts)}]
    for C in cfg.chunk_sizes:
        outs = {t: req.chunked(t, C) for t in ts}
        modes.append({"mode": f"chunked:{C}", "vs_prefill": _summary([(outs[t], pre[:, t]) for t in ts], fmt),
                      "vs_golden_ulp": max(max_ulp(outs[t], golden[t], fmt) for t in ts)})
    for P in cfg.page_sizes:
        outs = {t: req.paged(t, P) for t in ts}
        modes.append({"mode": f"paged:{P}", "vs_prefill": _summary([(outs[t], pre[:, t]) for t in ts], fmt),
                      "vs_golden_ulp": max(max_ulp(outs[t], golden[t], fmt) for t in ts)})
    rules = [_rule_study(req, rule, ts) for rule in cfg.rules]
    return {"config": cfg.to_dict(), "positions": ts, "format": fmt.name, "baseline_vs_golden_ulp": baseline_ulp,
            "rules": rules, "modes": modes,
            "timing_s": time.perf_counter() - t0}
