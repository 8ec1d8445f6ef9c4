"""``attnum spec``: the exact TV of speculative decoding under finite precision, per format and k,
and the table of named mechanisms that break its exactness.

Inputs are seeded logits: target (k+1, V) ~ logit_std * N(0, 1), draft = target + draft_noise * N(0, 1)
(a draft close to its target, as a distilled draft model is). Every number comes from
:mod:`attnum.sampling`'s exact enumeration, except the optional Monte-Carlo path.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from attnum.errors import bad_value
from attnum.numerics.formats import get_format
from attnum.sampling import (
    MAX_OUTCOMES,
    NOISE,
    SpecProcedure,
    greedy_ties,
    race_law,
    simulate,
    spec_law,
    spec_tv,
)

MAX_K = 256  # draft tokens per step: real speculative decoders draft a handful; this bounds the Monte-Carlo path


def _tuple(value, cast, param: str) -> tuple:
    items = value.split(",") if isinstance(value, str) else (value if isinstance(value, (tuple, list)) else [value])
    try:
        out = tuple(cast(x.strip() if isinstance(x, str) else x) for x in items)
    except (TypeError, ValueError):
        raise bad_value(param, value, "a value or a comma-separated list") from None
    if not out:
        raise bad_value(param, value, "at least one value")
    return out


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    """``attnum spec``'s flags, one field each (``format`` and ``k`` may be lists: a grid)."""

    vocab: int = 32
    k: tuple[int, ...] = (4,)
    format: tuple[str, ...] = ("bf16",)
    draft_format: str | None = None
    noise: str = "exact"
    q_zero: str = "reject"
    zero_residual: str = "fail"
    uniform_bits: int | None = None
    logit_std: float = 2.0
    draft_noise: float = 0.5
    seed: int = 0
    monte_carlo: int | None = None  # samples; the path for vocabularies too large to enumerate

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", _tuple(self.k, int, "k"))
        object.__setattr__(self, "format", tuple(get_format(f).name for f in _tuple(self.format, str, "format")))
        if not isinstance(self.vocab, int) or self.vocab < 2:
            raise bad_value("vocab", self.vocab, "an integer >= 2")
        for k in self.k:
            if not 1 <= k <= MAX_K:
                raise bad_value("k", k, f"integers in [1, {MAX_K}] (draft tokens per step)")
            # k + 1 > 27 already exceeds 2**27 at vocab >= 2; the test first keeps vocab**(k+1) small
            if self.monte_carlo is None and (k + 1 > 27 or self.vocab ** (k + 1) > MAX_OUTCOMES):
                raise bad_value("vocab", self.vocab, f"vocab**(k+1) <= 2**27 to enumerate (k={k}); pass "
                                "--monte-carlo N for the Monte-Carlo path")
        if not (self.logit_std > 0 and self.draft_noise >= 0):
            raise bad_value("logit_std/draft_noise", (self.logit_std, self.draft_noise), "logit_std > 0, draft_noise >= 0")
        if self.monte_carlo is not None and (not isinstance(self.monte_carlo, int) or self.monte_carlo < 100):
            raise bad_value("monte_carlo", self.monte_carlo, "an integer >= 100 (samples)")
        self.procedure(self.format[0])  # validates the procedure fields

    def procedure(self, fmt: str) -> SpecProcedure:
        return SpecProcedure(format=fmt, draft_format=self.draft_format, q_zero=self.q_zero,
                             zero_residual=self.zero_residual, noise=self.noise, uniform_bits=self.uniform_bits)

    def logits(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed)
        t = self.logit_std * torch.randn(k + 1, self.vocab, generator=g, dtype=torch.float64)
        return t, t[:k] + self.draft_noise * torch.randn(k, self.vocab, generator=g, dtype=torch.float64)


def run_spec(cfg: SpecConfig) -> dict:
    """One row per (format, k): exact TVs, or the Monte-Carlo estimate."""
    rows = []
    for k in cfg.k:
        t, d = cfg.logits(k)
        for fmt in cfg.format:
            t0 = time.perf_counter()
            proc = cfg.procedure(fmt)
            if cfg.monte_carlo is None:
                r = spec_tv(t, d, procedure=proc)
                row = {"tv": r.tv, "tv_plain": r.tv_plain, "tv_first": r.tv_first, "fail": r.fail,
                       "expected_tokens": r.expected_tokens,
                       "ratio": r.tv / r.tv_plain if r.tv_plain > 0 else math.nan}
            else:
                row = _monte_carlo(t, d, proc, cfg)
            rows.append({"format": fmt, "k": k, "vocab": cfg.vocab, **row, "seconds": time.perf_counter() - t0})
    return {"config": {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}, "rows": rows}


def _monte_carlo(t, d, proc: SpecProcedure, cfg: SpecConfig) -> dict:
    """Plug-in TV of the first emitted token from n simulated steps, beside the plug-in TV of n
    exact target draws (the estimator's own floor at this n: below it nothing is resolved)."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    n, V = cfg.monte_carlo, cfg.vocab
    blocks = simulate(t, d, n, procedure=proc, generator=g)
    first = blocks[:, 0]
    fail = float((first == -2).double().mean())
    p = torch.softmax(t[0], -1)
    emp = torch.bincount(first[first >= 0], minlength=V).double() / n
    ref = torch.bincount(torch.multinomial(p, n, replacement=True, generator=g), minlength=V).double() / n
    emitted = (blocks >= 0).sum(-1).double().mean().item()
    return {"mc_tv_first": 0.5 * ((emp - p).abs().sum().item() + fail), "mc_floor": 0.5 * (ref - p).abs().sum().item(),
            "fail": fail, "expected_tokens": emitted, "samples": n}


def mechanisms() -> list[dict]:
    """Each named way the step stops being exact, with its measured TV or rate (exact unless noted)."""
    rows = []
    P = SpecProcedure
    p2 = torch.tensor([0.5, 0.5], dtype=torch.float64)
    q2 = torch.tensor([2.0**-12, 1 - 2.0**-12], dtype=torch.float64)
    tv = spec_tv(p2, q2, k=1, kind="probs", procedure=P(format="e4m3fn", draft_format="fp64")).tv
    rows.append({"mechanism": "q = 0 where p > 0", "setting": "q = 2^-12 underflows in e4m3fn; draft samples in fp64",
                 "measure": "TV", "value": tv, "without": 0.0})
    cfg = SpecConfig(vocab=32, k=(2,), format=("e4m3fn",), logit_std=3.0, draft_noise=0.5)
    t, d = cfg.logits(2)
    same = spec_tv(t, d, procedure=P(format="e4m3fn")).tv
    mism = spec_tv(t, d, procedure=P(format="e4m3fn", draft_format="fp64")).tv
    rows.append({"mechanism": "q = 0 where p > 0", "setting": "V=32, k=2, e4m3fn probabilities; draft samples in fp64",
                 "measure": "TV (vs 'same format' draft)", "value": mism, "without": same})
    q3 = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    p3 = torch.tensor([0.0, 0.5 - 2.0**-24, 0.5], dtype=torch.float64)
    for rule in ("first", "fail", "target"):
        law = spec_law(p3, q3, k=1, kind="probs", procedure=P(format="fp32", zero_residual=rule))
        tv = spec_tv(p3, q3, k=1, kind="probs", procedure=P(format="fp32", zero_residual=rule)).tv
        rows.append({"mechanism": "p = q (all-zero residual, 0/0)",
                     "setting": f"fp32, p^ <= q^, sum p^ = 1 - 2^-24; zero_residual={rule}",
                     "measure": "TV; P(token with p=0)" if rule == "first" else "TV",
                     "value": tv, "extra": float(law.reject[0, 0]), "without": 0.0})
    g = torch.Generator().manual_seed(0)
    x = 3.0 * torch.randn(1000, 32000, generator=g, dtype=torch.float64)
    for fmt in ("bf16", "fp16", "fp32"):
        r = greedy_ties(x, fmt)
        rows.append({"mechanism": "greedy ties (vLLM #7627)", "setting": f"V=32000, logits 3 N(0,1) in {fmt}, 1000 rows",
                     "measure": "P(tied max); P(top-2 within 1 ulp)", "value": r["tie_rate"],
                     "extra": r["near_tie_rate"], "without": 0.0})
    w = torch.cat([torch.ones(1, dtype=torch.float64), torch.full((262144,), math.exp(-20.5), dtype=torch.float64)])
    exact = race_law(w, NOISE["exact"])
    for name, label in (("exp-fp32", "fp32 exponential noise floor 2^-24 (vLLM PR 43150)"),
                        ("gumbel-tlrand", "Gumbel noise cap ~21.5 from tl.rand's 2^-31 (vLLM PR 47524)")):
        law = race_law(w, NOISE[name])
        rows.append({"mechanism": label, "setting": "1 head + 262,144 tail tokens at logit gap 20.5",
                     "measure": "TV (tail mass lost of 3.28e-4)", "value": 0.5 * float((law - exact).abs().sum()),
                     "without": 0.0})
    p4 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    q4 = torch.tensor([0.5, 0.5], dtype=torch.float64)
    tv = spec_tv(p4, q4, k=1, kind="probs", procedure=P(format="fp32", uniform_bits=24)).tv
    rows.append({"mechanism": "acceptance uniform on the fp32 grid (u = 0 possible)",
                 "setting": "p = (1, 0), q = (1/2, 1/2); accept when u <= p/q (vLLM, HF)",
                 "measure": "TV (the p = 0 token emitted)", "value": tv, "without": 0.0})
    return rows
