"""Reduction order across ranks: the emulated all-reduce (:mod:`attnum.numerics.allreduce`) in a tensor-parallel
output projection and a data-parallel gradient average, and the check against torch.distributed's gloo.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnum.errors import bad_value
from attnum.numerics.allreduce import ALGORITHMS, allreduce_sum, grad_allreduce_mean, row_parallel_linear
from attnum.numerics.formats import get_format, torch_dtype
from attnum.numerics.rounding import round_to
from attnum.studies.parallel.spawn import run_ranks


def rank_data(seed: int, rank: int, n: int, fmt: str) -> torch.Tensor:
    """Rank ``rank``'s values (float64 on ``fmt``'s grid): signed, magnitudes over 2**-10..2**10, so
    that different summation orders round differently almost everywhere."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    x = torch.randn(n, generator=g, dtype=torch.float64)
    x = x * torch.exp2(torch.randint(-10, 11, (n,), generator=g).double())
    return round_to(x, get_format(fmt))


def _allreduce_rank(rank: int, world: int, seed: int, specs: tuple) -> list[torch.Tensor]:
    import torch.distributed as dist

    outs = []
    for n, fmt in specs:
        x = rank_data(seed, rank, n, fmt).to(torch_dtype(fmt))
        dist.all_reduce(x)  # SUM
        outs.append(x.double())
    return outs


def gloo_allreduce_check(world: int, specs, *, seed: int = 0, timeout: float = 120.0) -> list[dict]:
    """All-reduce the same data with real gloo (``world`` processes) and with every emulated order.

    ``specs``: (n, format) pairs, all run in one launch. Returns per spec whether all ranks agree and,
    per algorithm, how many elements differ from gloo's result.
    """
    specs = tuple((int(n), get_format(f).name) for n, f in specs)
    outs = run_ranks(_allreduce_rank, world, args=(seed, specs), timeout=timeout)
    rows = []
    for i, (n, fmt) in enumerate(specs):
        parts = [rank_data(seed, r, n, fmt) for r in range(world)]
        mismatches = {alg: int((allreduce_sum(parts, fmt, algorithm=alg) != outs[0][i]).sum()) for alg in ALGORITHMS}
        rows.append({"world": world, "n": n, "format": fmt, "mismatches": mismatches,
                     "ranks_agree": all(torch.equal(outs[0][i], o[i]) for o in outs), "gloo": outs[0][i]})
    return rows


def _tuple(v, cast, param):
    items = v.split(",") if isinstance(v, str) else (v if isinstance(v, (tuple, list)) else [v])
    try:
        return tuple(cast(x) for x in items)
    except (TypeError, ValueError):
        raise bad_value(param, v, "a value or a comma-separated list") from None


@dataclass(frozen=True, kw_only=True)
class AllreduceConfig:
    """The TP / DP reduction-order study: degrees, algorithms, all-reduce formats, layer shape."""

    tp: tuple[int, ...] = (1, 2, 4, 8)
    algorithms: tuple[str, ...] = ALGORITHMS
    reduce_formats: tuple[str, ...] = ("bf16", "fp32")
    tokens: int = 256
    in_features: int = 4096
    out_features: int = 512
    dp: tuple[int, ...] = (2, 4, 8, 16)
    grad_size: int = 1 << 16
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "tp", _tuple(self.tp, int, "tp"))
        object.__setattr__(self, "dp", _tuple(self.dp, int, "dp"))
        object.__setattr__(self, "algorithms", _tuple(self.algorithms, str, "algorithms"))
        object.__setattr__(self, "reduce_formats", tuple(get_format(f).name for f in
                                                         _tuple(self.reduce_formats, str, "reduce_formats")))
        for a in self.algorithms:
            if a not in ALGORITHMS:
                raise bad_value("algorithms", a, f"a subset of {ALGORITHMS}")
        for t in self.tp:
            if t < 1 or self.in_features % t:
                raise bad_value("tp", t, f"positive divisors of in_features={self.in_features}")
        if min(self.dp) < 1:
            raise bad_value("dp", self.dp, "positive integers")


def _errors(y: torch.Tensor, gold: torch.Tensor, ref: torch.Tensor) -> dict:
    """Errors against the float64 value at the output's scale (ulp counts blow up where the exact
    value cancels to ~0, so none here), and the fraction of outputs that differ from ``ref``."""
    e = (y - gold).abs()
    return {"rel_max_abs": float(e.max() / gold.abs().max()),
            "rel_rmse": float(e.pow(2).mean().sqrt() / gold.pow(2).mean().sqrt()),
            "changed": float((y != ref).double().mean())}


def run_allreduce_study(cfg: AllreduceConfig) -> dict:
    """Rows for the row-parallel projection (deviation against TP degree, order, all-reduce format)
    and for the DP gradient average (against the number of ranks)."""
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.tokens, cfg.in_features, generator=g, dtype=torch.float64)
    w = torch.randn(cfg.in_features, cfg.out_features, generator=g, dtype=torch.float64) / cfg.in_features**0.5
    xb, wb = round_to(x, get_format("bf16")), round_to(w, get_format("bf16"))
    gold = xb @ wb  # float64: exact to ~K * 2**-53 relative
    rows = []
    unsharded = row_parallel_linear(x, w, tp=1, reduce_format="fp32")  # "changed": against TP = 1
    for red in cfg.reduce_formats:
        for tp in cfg.tp:
            for alg in (cfg.algorithms if tp > 1 else ("none",)):
                y = row_parallel_linear(x, w, tp=tp, reduce_format=red, algorithm=alg if tp > 1 else "sequential")
                rows.append({"study": "tp", "tp": tp, "algorithm": alg, "reduce_format": red,
                             **_errors(y, gold, unsharded)})
    grads_mu = torch.randn(cfg.grad_size, generator=g, dtype=torch.float64)
    for red in cfg.reduce_formats:
        for P in cfg.dp:
            grads = [round_to(grads_mu + torch.randn(cfg.grad_size, generator=g, dtype=torch.float64), get_format(red))
                     for _ in range(P)]
            exact = torch.stack(grads).sum(0) / P  # float64: exact for P <= 2**(53-24)
            nearest = round_to(exact, get_format(red))  # "changed": against the correctly rounded mean
            for alg in (cfg.algorithms if P > 1 else ("none",)):
                m = grad_allreduce_mean(grads, red, algorithm=alg if P > 1 else "sequential")
                rows.append({"study": "dp", "dp": P, "algorithm": alg, "reduce_format": red,
                             **_errors(m, exact, nearest)})
    return {"config": {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}, "rows": rows}
