"""Crafted (p, q) pairs a speculative sampler is audited on, each aimed at one way to get it wrong.

Every case is (target p (k+1, V), draft q (k, V)) in float64, rows summing to 1, small enough that
the exact law of the emitted block has few cells (sum over n of V**(n+1)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnum.errors import bad_value


@dataclass(frozen=True)
class Case:
    name: str
    p: torch.Tensor  # (k+1, V)
    q: torch.Tensor  # (k, V)
    why: str

    @property
    def k(self) -> int:
        return self.q.shape[0]

    @property
    def V(self) -> int:
        return self.q.shape[1]


def _norm(x: torch.Tensor) -> torch.Tensor:
    return x / x.sum(-1, keepdim=True)


def _softmax(g: torch.Generator, rows: int, V: int, temp: float) -> torch.Tensor:
    return torch.softmax(temp * torch.randn(rows, V, generator=g, dtype=torch.float64), -1)


def _build() -> dict[str, Case]:
    g = torch.Generator().manual_seed(20240611)

    def dirichlet(rows: int, V: int) -> torch.Tensor:  # Dirichlet(1, ..., 1): normalised Exp(1) draws
        return _norm(torch.empty(rows, V, dtype=torch.float64).exponential_(generator=g))

    cases = [Case("dirichlet", dirichlet(3, 6), dirichlet(2, 6), "generic p and q: every branch of the step")]
    p = _softmax(g, 4, 4, 2.0)
    cases.append(Case("peaked", p, _softmax(g, 3, 4, 0.5),
                      "peaked target, flat draft, k = 3: ratios far above and below 1 at every position"))
    p = _softmax(g, 3, 4, 1.0)
    q = _norm(p[:2] * (1 + 0.3 * torch.rand(2, 4, generator=g, dtype=torch.float64)))
    cases.append(Case("near-equal", p, q, "q close to p: most steps reach the bonus token"))
    p, q = _softmax(g, 3, 5, 1.0), _softmax(g, 2, 5, 1.0)
    q[:, [1, 3]] = 0.0
    cases.append(Case("q-zero", p, _norm(q), "q = 0 where p > 0: those tokens come only from the residual"))
    p, q = _softmax(g, 3, 5, 1.0), _softmax(g, 2, 5, 1.0)
    p[:2, [0, 2]] = 0.0
    cases.append(Case("p-zero", _norm(p), q, "p = 0 where q > 0: those drafts must always be rejected"))
    p = _softmax(g, 3, 5, 1.0)
    q = torch.stack([p[0], _softmax(g, 1, 5, 1.0)[0]])
    cases.append(Case("p-equals-q", p, q, "p = q at position 1: never rejected there (all-zero residual)"))
    p = torch.tensor([[0.7, 0.3, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.0, 0.4, 0.6]], dtype=torch.float64)
    cases.append(Case("disjoint", p, q, "disjoint supports: always rejected, y ~ p"))
    return {c.name: c for c in cases}


CASES: dict[str, Case] = _build()


def get_cases(names: tuple[str, ...] | None) -> list[Case]:
    if names is None:
        return list(CASES.values())
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        raise bad_value("cases", ",".join(names), f"a comma-separated subset of {list(CASES)}")
    return [CASES[n] for n in names]
