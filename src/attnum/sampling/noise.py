"""Categorical draws: exact, or an exponential race whose noise is clamped (a floor from the
uniform's resolution, vLLM PRs 43150 and 47524), with the race's exact law in closed form.

Shape alphabet: V vocabulary, n draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attnum.errors import bad_value

_INF = math.inf


@dataclass(frozen=True, kw_only=True)
class Noise:
    """Categorical draws by the exponential race argmax_i w_i / E_i with E_i ~ Exp(1) clamped to
    [floor, cap] (equivalently Gumbel-max with the Gumbel noise capped at -ln floor). ``floor=0``,
    ``cap=inf``: the exact categorical w / sum(w)."""

    floor: float = 0.0
    cap: float = _INF
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not (0.0 <= self.floor < self.cap):
            raise bad_value("noise", (self.floor, self.cap), "0 <= floor < cap")

    @property
    def exact(self) -> bool:
        return self.floor == 0.0 and self.cap == _INF


NOISE: dict[str, Noise] = {
    "exact": Noise(name="exact"),
    # vLLM PR 43150: 200M fp32 exponential_() samples had minimum exactly 2**-24 and none below.
    "exp-fp32": Noise(floor=float.fromhex("0x1p-24"), name="exp-fp32"),
    # Gumbel from a uniform on a 2**-b grid: u <= 1 - 2**-b caps g at -log(-log1p(-2**-b)).
    "gumbel-fp32": Noise(floor=-math.log1p(-float.fromhex("0x1p-24")), name="gumbel-fp32"),
    # vLLM PR 47524: tl.rand resolves 2**-31, capping the Gumbel noise at ~21.5 = 31 ln 2.
    "gumbel-tlrand": Noise(floor=-math.log1p(-float.fromhex("0x1p-31")), name="gumbel-tlrand"),
    "exp-fp64": Noise(floor=float.fromhex("0x1p-53"), name="exp-fp64"),
}


def get_noise(spec: str | Noise) -> Noise:
    """A preset name, or ``race:FLOOR[:CAP]`` (e.g. ``race:1e-3``)."""
    if isinstance(spec, Noise):
        return spec
    if isinstance(spec, str) and spec in NOISE:
        return NOISE[spec]
    if isinstance(spec, str) and spec.startswith("race:"):
        try:
            parts = [float(x) for x in spec.split(":")[1:]]
            return Noise(floor=parts[0], cap=parts[1] if len(parts) > 1 else _INF, name=spec)
        except (ValueError, IndexError):
            pass
    raise bad_value("noise", spec, f"one of {sorted(NOISE)} or 'race:FLOOR[:CAP]'")


def race_law(w: torch.Tensor, noise: Noise) -> torch.Tensor | None:
    """The exact law (V,) of argmax_i w_i / E_i, E_i ~ Exp(1) clamped to [floor, cap]; None if w == 0.

    Closed form. Tokens of equal weight form a group (m members: the group's best noise is a
    clamped Exp(m)). In x = 1/score the CDF of group h is exp(-m_h w_h x) between floor/w_h and
    cap/w_h, so the win probability is a sum of exponential integrals between sorted breakpoints,
    plus two atoms: every token of a group at the floor (ties go to the lowest index, as argmax),
    and all noise at the cap. Exact except where two groups' atoms coincide (w_g/w_h = floor/cap).
    """
    w = w.double()
    pos = w > 0
    if not bool(pos.any()):
        return None
    if noise.exact:
        return w / w.sum()
    vals, inv, counts = torch.unique(w[pos], return_inverse=True, return_counts=True)
    wv, m = vals.flip(0), counts.flip(0).double()  # groups by weight, heaviest first
    inv = vals.numel() - 1 - inv
    lam = m * wv
    L = torch.cumsum(lam, 0)  # rate of the groups active once x passes c_j
    c = noise.floor / wv  # breakpoints, ascending
    b = noise.cap / wv[0]  # beyond it the heaviest group's score is impossible
    u = c.clamp(max=b)
    v = torch.cat([c[1:], c.new_tensor([_INF])]).clamp(max=b)
    piece = torch.where(v > u, torch.exp(-L * u) * -torch.expm1(-L * (v - u).clamp(min=0)) / L, 0.0)
    cont = lam * torch.flip(torch.cumsum(torch.flip(piece, [0]), 0), [0])  # group's continuous part
    floor_atom = torch.where(c <= b, -torch.expm1(-m * noise.floor) * torch.exp(-c * (L - lam)), 0.0)
    out = torch.zeros_like(w)
    idx = torch.nonzero(pos).squeeze(-1)
    out[idx] = (cont / m)[inv]
    if noise.floor > 0:  # the lowest-index member at the floor wins: shares pi (1 - pi)^rank
        pi = -math.expm1(-noise.floor)
        rank = _rank_within_group(inv)
        share = pi * (1 - pi) ** rank / -torch.expm1(-m[inv] * noise.floor)
        out[idx] += floor_atom[inv] * share
    if noise.cap < _INF:  # everything at the cap: the heaviest group's lowest index wins
        first = idx[inv == 0][0]
        out[first] += torch.exp(-(lam * (c < b)).sum() * b)
    return out


def _rank_within_group(inv: torch.Tensor) -> torch.Tensor:
    """For each element, how many earlier elements share its group."""
    order = torch.argsort(inv, stable=True)
    sorted_inv = inv[order]
    starts = torch.searchsorted(sorted_inv, sorted_inv, right=False)
    rank = torch.empty_like(inv)
    rank[order] = torch.arange(inv.numel()) - starts
    return rank.double()


def draw(w: torch.Tensor, n: int, noise: Noise, generator) -> torch.Tensor:
    """n categorical draws from weights w (V,): multinomial, or a real race with clamped noise."""
    if noise.exact:
        return torch.multinomial(w / w.sum(), n, replacement=True, generator=generator)
    E = torch.empty(n, w.shape[0], dtype=torch.float64).exponential_(generator=generator)
    return torch.argmax(w[None, :] / E.clamp_(noise.floor, noise.cap), dim=-1)  # ties: first index
