"""The in-process spec audit (one case at a time; :mod:`.runner` drives it, :mod:`.isolate` runs it in a child).

Run a speculative sampler many times on the crafted cases and test its blocks against the exact law.

Per case: the exact law of the emitted block (:func:`attnum.sampling.block_law` of the float64
procedure), drafts drawn by the auditor from q, the sampler called in batches, its blocks counted
per cell. A case fails when a block of probability 0 appears, when an accepted token is not the
drafted one, or when Pearson's chi-square rejects at alpha / (number of cases) (Bonferroni: the
whole audit's false-alarm rate is at most alpha). The sample size per case comes from the power
analysis (:mod:`attnum.spec_audit.stats`) unless given; the report states the TV every case detects.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnum.errors import AttnumInputError, bad_value
from attnum.sampling import SpecProcedure, block_cells, block_index, block_law, spec_law
from attnum.spec_audit import stats
from attnum.spec_audit.cases import Case, get_cases

_EXACT = SpecProcedure(format="fp64")


@dataclass(frozen=True, kw_only=True)
class SpecAuditConfig:
    """``attnum spec-audit``'s flags, one field each."""

    target: str
    cases: tuple[str, ...] | None = None
    samples: int | None = None  # per case; None: from the power analysis for detect_tv
    detect_tv: float = 0.01
    alpha: float = 1e-3
    power: float = 0.99
    batch: int = 1 << 16
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.cases, str):
            object.__setattr__(self, "cases", tuple(c.strip() for c in self.cases.split(",") if c.strip()))
        get_cases(self.cases)
        if self.samples is not None and (not isinstance(self.samples, int) or self.samples < 1):
            raise bad_value("samples", self.samples, "a positive integer or None (power analysis)")
        if not 0 < self.detect_tv <= 1:
            raise bad_value("detect_tv", self.detect_tv, "a TV distance in (0, 1]")
        if not 0 < self.alpha < 1:
            raise bad_value("alpha", self.alpha, "a false-alarm rate in (0, 1)")
        if not self.alpha < self.power < 1:
            raise bad_value("power", self.power, f"a probability in (alpha={self.alpha}, 1)")
        if not isinstance(self.batch, int) or self.batch < 1:
            raise bad_value("batch", self.batch, "a positive integer")


def exact_cells(case: Case) -> torch.Tensor:
    return block_law(spec_law(case.p, case.q, kind="probs", procedure=_EXACT))


def _samples(expected: torch.Tensor, cfg: SpecAuditConfig, alpha_case: float) -> int:
    if cfg.samples is not None:
        return cfg.samples
    n = 1000
    for _ in range(4):  # the bins depend on n; two or three rounds settle it
        df = max(1, int(stats.bins(expected, n).max()))
        n = max(1000, stats.samples_for_tv(cfg.detect_tv, df, alpha_case, cfg.power))
    return n


def _run_case(case: Case, fn, cfg: SpecAuditConfig, alpha_case: float, gen: torch.Generator) -> dict:
    expected = exact_cells(case)
    n = _samples(expected, cfg, alpha_case)
    counts = torch.zeros(block_cells(case.k, case.V), dtype=torch.int64)
    violations = 0
    for b0 in range(0, n, cfg.batch):
        B = min(cfg.batch, n - b0)
        drafts = torch.stack([torch.multinomial(case.q[j], B, replacement=True, generator=gen)
                              for j in range(case.k)], -1)
        p = case.p.expand(B, *case.p.shape).clone()
        q = case.q.expand(B, *case.q.shape).clone()
        out = fn(p, q, drafts.clone(), generator=gen)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, case.k + 1):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise AttnumInputError(f"sampler output on case {case.name!r} is {got}; expected a ({B}, "
                                   f"{case.k + 1}) integer tensor (tokens, then -1 padding)")
        try:
            ids = block_index(out, case.V)
        except AttnumInputError as err:
            raise AttnumInputError(f"case {case.name!r}: {err}") from None
        out = out.long()
        accepted = (out != -1).sum(-1, keepdim=True) - 1
        pos = torch.arange(case.k)[None, :]
        violations += int(((pos < accepted) & (out[:, :case.k] != drafts)).any(-1).sum())
        counts += torch.bincount(ids, minlength=counts.numel())
    ids = stats.bins(expected, n)
    impossible = int(counts[expected == 0].sum())
    stat, df = stats.pearson(counts, expected, ids)
    p_value = stats.chi2_sf(stat, df)
    observed_tv = 0.5 * float((counts.double() / n - expected).abs().sum())
    ok = impossible == 0 and violations == 0 and p_value >= alpha_case
    return {
        "case": case.name, "k": case.k, "V": case.V, "cells": counts.numel(), "bins": df + 1, "df": df,
        "samples": n, "statistic": stat, "p_value": p_value, "alpha": alpha_case,
        "detectable_tv": stats.detectable_tv(n, df, alpha_case, cfg.power) if df > 0 else None,
        "observed_tv": observed_tv, "impossible": impossible, "prefix_violations": violations,
        "verdict": "pass" if ok else "fail", "why": case.why,
    }


def generator(cfg: SpecAuditConfig, start: int = 0) -> torch.Generator:
    """The generator of the cases from ``start`` on: one stream for a whole audit (start 0); a child
    restarted after a crash at case ``start`` gets its own, still fixed by the seed."""
    return torch.Generator().manual_seed(cfg.seed + 1_000_003 * start)


def failed_row(case: Case, error: str) -> dict:
    return {"case": case.name, "k": case.k, "V": case.V, "verdict": "fail", "error": error, "why": case.why}


def run_case(case: Case, fn, cfg: SpecAuditConfig, alpha_case: float, gen: torch.Generator) -> dict:
    """One case's row; a sampler that raises (or calls ``sys.exit``) fails its case."""
    try:
        return _run_case(case, fn, cfg, alpha_case, gen)
    except AttnumInputError:
        raise
    except SystemExit as exc:
        return failed_row(case, f"the sampler called sys.exit({exc.code!r})")
    except Exception as exc:  # noqa: BLE001 - a sampler that crashes fails its case
        return failed_row(case, f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__)


def summary(name: str, cfg: SpecAuditConfig, rows: list[dict], seconds: float, n_cases: int) -> dict:
    """The audit's document. It passes only when every case ran and passed: no row, or fewer rows
    than cases, is a fail (nothing a sampler does can turn into a pass)."""
    ok = bool(rows) and len(rows) == n_cases and all(r.get("verdict") == "pass" for r in rows)
    return {"target": name, "alpha": cfg.alpha, "power": cfg.power, "seed": cfg.seed,
            "verdict": "pass" if ok else "fail", "cases": rows, "seconds": seconds}
