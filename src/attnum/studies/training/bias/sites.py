"""Signed error per rounding site of flash, forward and backward: which site makes O, dQ, dK, dV and
the backward's delta D = rowsum(dO * O) one-sided, with and without Qiu & Yao's max shift.

For each site, the run where *only that site* rounds to the policy's format and every other site is
exact; "exact" is the policy's carrier format (as ``attnum attribute`` defines it: a float64 site
would move the whole computation to a float64 carrier and change the matmuls too). ``full`` is the
policy itself, ``floor`` the run where no site rounds. Every run is compared with float64 golden
attention and its float64 autograd on the same (rounded) inputs and the same dO, with the signed
metrics of :func:`attnum.numerics.metrics.deviation`: ``mean_signed`` = mean(e), ``bias`` =
mean(e * sign(ref)) / mean|e| (+1: every error enlarges |x|), ``rel_mean_signed`` = mean(e) / mean|ref|.

Shape alphabet: B batch, H heads, N queries, S keys, d head dim.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch

from attnum.attention import flash_attention, golden_attention
from attnum.attention.flash_backward import flash_backward
from attnum.attention.ties import score_ties
from attnum.errors import AttnumInputError, bad_value
from attnum.numerics.formats import PRESETS
from attnum.numerics.metrics import deviation
from attnum.numerics.policy import MAX_SHIFTS, Policy, parse_policy
from attnum.numerics.rounding import round_to
from attnum.workloads.inputs import DISTS, InputSpec, make_qkv

FORWARD_SITES = ("scores", "exp", "probs", "row_sum", "rescale", "acc", "out")
BACKWARD_SITES = (*FORWARD_SITES, "lse")  # the stored LSE enters the backward's recomputed P
QUANTITIES = ("o", "dq", "dk", "dv", "delta")
KEYS = ("mean_signed", "bias", "rel_mean_signed", "rel_mean_abs")


@dataclass(frozen=True, kw_only=True)
class SiteBiasConfig:
    policy: str = "uniform:bf16"
    dist: str = "ties"
    seq_len: int = 256
    head_dim: int = 32
    heads: int = 2
    block_k: int = 16
    logit_scale: float = 1.0
    causal: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        parse_policy(self.policy)
        if self.dist not in DISTS:
            raise bad_value("dist", self.dist, f"one of {DISTS}")
        for name in ("seq_len", "head_dim", "heads", "block_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise AttnumInputError(f"{name}={getattr(self, name)!r} is not allowed; expected a positive integer")


def _exact(policy: Policy):
    return PRESETS["fp32"] if policy.carrier.itemsize == 4 else PRESETS["fp64"]


def only_site(policy: Policy, site: str | None) -> Policy:
    """``policy`` with every site of BACKWARD_SITES exact except ``site`` (None: none rounds)."""
    exact = _exact(policy)
    over = {s: exact for s in BACKWARD_SITES if s != site}
    return policy.with_overrides(**over)


def rounds(policy: Policy, site: str) -> bool:
    return not _exact(policy).fits_in(getattr(policy, site))


def _signed(x: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    d = deviation(x, ref)
    return {k: d[k] for k in KEYS}


def run_site_bias(cfg: SiteBiasConfig) -> dict:
    """{"config", "ties", "golden_scale", "runs": {shift: {"full"|"floor"|site: {quantity: metrics}}},
    "timing_s"}; quantities o, dq, dk, dv, delta (forward sites only change o through the forward)."""
    t0 = time.perf_counter()
    base = parse_policy(cfg.policy)
    spec = InputSpec(batch=1, heads=cfg.heads, seq_len=cfg.seq_len, head_dim=cfg.head_dim, dist=cfg.dist,
                     logit_scale=cfg.logit_scale, seed=cfg.seed)
    q, k, v = (round_to(x, base.inputs) for x in make_qkv(spec))
    do = round_to(torch.randn(q.shape, generator=torch.Generator().manual_seed(cfg.seed + 1),
                              dtype=torch.float64), base.inputs)
    scale = 1.0 / math.sqrt(cfg.head_dim)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    o_gold = golden_attention(qg, kg, vg, is_causal=cfg.causal)
    gold = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(o_gold, (qg, kg, vg), do)))
    gold["o"] = o_gold.detach()
    gold["delta"] = (do * gold["o"]).sum(-1)
    from attnum.attention import masks

    mk = masks.masking(None, cfg.causal, (1, cfg.heads, cfg.seq_len, cfg.seq_len))

    def run(policy: Policy) -> dict:
        out, lse = flash_attention(q, k, v, policy=policy, block_k=cfg.block_k, is_causal=cfg.causal,
                                   return_lse=True)
        dq, dk, dv, delta = flash_backward(q, k, v, out, lse, do, mk=mk, scale=scale, policy=policy,
                                           Bc=cfg.block_k, return_delta=True)
        got = {"o": out, "dq": dq, "dk": dk, "dv": dv, "delta": delta}
        return {name: _signed(got[name], gold[name]) for name in QUANTITIES}

    runs: dict = {}
    for shift in MAX_SHIFTS:
        pol = base.with_overrides(max_shift=shift)
        r = {"full": run(pol), "floor": run(only_site(pol, None))}
        for site in BACKWARD_SITES:
            if rounds(pol, site):
                r[site] = run(only_site(pol, site))
        runs[shift] = r
    return {
        "config": asdict(cfg),
        "ties": {"row": score_ties(q, k, policy=base, is_causal=cfg.causal).as_dict(),
                 "tile": score_ties(q, k, policy=base, is_causal=cfg.causal, block=cfg.block_k).as_dict()},
        "golden_scale": {name: float(t.abs().mean()) for name, t in gold.items()},
        "runs": runs,
        "timing_s": time.perf_counter() - t0,
    }


def site_table(result: dict, key: str = "bias") -> list[list]:
    """Rows [shift, run, o, dq, dk, dv, delta] of ``key`` (for a report or a terminal)."""
    return [[shift, name, *(r[qn][key] for qn in QUANTITIES)]
            for shift, runs in result["runs"].items() for name, r in runs.items()]
