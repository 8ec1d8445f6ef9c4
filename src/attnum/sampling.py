"""Speculative decoding's accept/resample step under finite precision, and its exact output law.

Shape alphabet: V vocabulary, k draft tokens, n samples (Monte-Carlo), B a batch of steps.

The step (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): the draft proposes x_j ~ q_j for
j = 1..k; x_j is accepted with probability min(1, p_j(x_j) / q_j(x_j)); at the first rejection the step
emits y ~ norm(max(p_j - q_j, 0)) and stops; when all k are accepted it emits a bonus y ~ p_{k+1}. In
exact arithmetic every emitted token is distributed as the target.

*Position model.* p_j and q_j are given per position, (k+1, V) and (k, V), and do not depend on the
drafted prefix. Each verification's arithmetic depends on its own (p_j, q_j) only, so every rounding
mechanism is covered; what is not modelled is a target whose distribution depends on the prefix.

*The emulated procedure* (:class:`SpecProcedure`) rounds, through ``round_to`` at named sites, in one
format F:

============== ===================================================================================
logits         the logits as the model hands them over
exp            exp(l - max l)
sum            the softmax denominator (pairwise tree, every partial sum rounded)
probs          exp / sum: p^ and q^
ratio          p^(x) / q^(x)
residual       p^ - q^ (then max(., 0), exact)
residual_sum   the residual's sum (pairwise tree)
residual_probs residual / residual_sum
============== ===================================================================================

and then draws categorically (exactly from the weights, or by an exponential race whose noise has a
floor, :data:`NOISE`). Its *exact* output law is computed in float64 from those rounded values
(:func:`spec_law`), and its total-variation distance to the exact target (float64 softmax of the same
logits) by enumerating the V**(k+1) outcomes of a step completed by exact target draws
(:func:`spec_tv`). Completion: after the step stops at length m <= k+1 the remaining k+1-m positions
are drawn from the exact target, so that in exact arithmetic the completed block is distributed as
prod_j p_j and every deviation is the step's own. ``tv_plain`` is the same distance for plain
(non-speculative) sampling from p^ in the same format: the baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attnum.errors import AttnumInputError, bad_value
from attnum.formats import FloatFormat, get_format
from attnum.rounding import round_to

SITES = ("logits", "exp", "sum", "probs", "ratio", "residual", "residual_sum", "residual_probs")
Q_ZERO = ("reject", "accept")  # vLLM: `draft_prob > 0 and ...` rejects; p/0 = inf accepts
ZERO_RESIDUAL = ("fail", "first", "target")
MAX_OUTCOMES = 2**27  # V**(k+1) enumerated outcomes: ~1 GB of float64 work at most
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


@dataclass(frozen=True, kw_only=True)
class SpecProcedure:
    """How one speculative step is computed (see the module docstring for the sites).

    ``format``: every site's format. ``draft_format``: the format of the distribution the draft
    actually samples from (None: the verified q^ itself; another format models a draft sampled in
    other precision than the probabilities the verifier reads). ``q_zero``: a drafted token whose
    q^ is 0 is rejected (vLLM) or accepted (p/0 = inf). ``zero_residual``: when a rejection finds an
    all-zero residual (0/0), ``fail`` (an error: HF's multinomial raises), ``first`` (token 0: an
    exponential race over zeros, vLLM) or ``target`` (resample from p^). ``noise``: categorical
    draws (:data:`NOISE`). ``uniform_bits``: the acceptance uniform lies on the grid i * 2**-b
    (torch.rand in fp32: 24), accepted when ``u <= ratio`` (vLLM, HF); None: u continuous.
    """

    format: str | FloatFormat = "fp32"
    draft_format: str | FloatFormat | None = None
    q_zero: str = "reject"
    zero_residual: str = "fail"
    noise: str | Noise = "exact"
    uniform_bits: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "format", get_format(self.format))
        if self.draft_format is not None:
            object.__setattr__(self, "draft_format", get_format(self.draft_format, param="draft_format"))
        if self.q_zero not in Q_ZERO:
            raise bad_value("q_zero", self.q_zero, f"one of {Q_ZERO}")
        if self.zero_residual not in ZERO_RESIDUAL:
            raise bad_value("zero_residual", self.zero_residual, f"one of {ZERO_RESIDUAL}")
        object.__setattr__(self, "noise", get_noise(self.noise))
        b = self.uniform_bits
        if b is not None and (not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= 64):
            raise bad_value("uniform_bits", b, "None or an integer in 1..64")


# ---- emulated arithmetic ------------------------------------------------------------------------

def tree_sum(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Pairwise sum over the last dim, every partial sum rounded to ``fmt`` -> (..., 1)."""
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = torch.cat([x, torch.zeros_like(x[..., :1])], dim=-1)  # + 0 is exact
        x = round_to(x[..., 0::2] + x[..., 1::2], fmt)
    return x


def softmax_in(logits: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """softmax over the last dim at sites logits, exp, sum, probs (float64 holding fmt values)."""
    l = round_to(logits.double(), fmt)
    e = round_to(torch.exp(l - l.amax(dim=-1, keepdim=True)), fmt)
    return round_to(e / tree_sum(e, fmt), fmt)


def residual_in(p: torch.Tensor, q: torch.Tensor, fmt: FloatFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(max(p - q, 0)) at sites residual, residual_sum, residual_probs; the sum (..., 1)).
    Rows whose residual is all zero come back as zeros with sum 0."""
    r = round_to(p - q, fmt).clamp_(min=0.0)
    s = tree_sum(r, fmt)
    return torch.where(s > 0, round_to(r / torch.where(s > 0, s, 1.0), fmt), 0.0), s


def ratio_in(p: torch.Tensor, q: torch.Tensor, fmt: FloatFormat, q_zero: str) -> torch.Tensor:
    """p / q at site ratio. Where q = 0: NaN under ``reject`` (vLLM never compares: `draft_prob > 0
    and ...`), p / 0 = inf under ``accept`` (and 0/0 = NaN). NaN is never accepted."""
    r = round_to(p / torch.where(q > 0, q, 1.0), fmt)
    at_zero = torch.where(p > 0, _INF, math.nan) if q_zero == "accept" else torch.full_like(p, math.nan)
    return torch.where(q > 0, r, at_zero)


def accept_prob(ratio: torch.Tensor, uniform_bits: int | None) -> torch.Tensor:
    """P(accept): P(u < ratio) for a continuous u ~ U[0, 1); P(u <= ratio) for u uniform on
    {i * 2**-b : 0 <= i < 2**b} (torch.rand's fp32 grid for b = 24, compared as vLLM and HF do, so
    ratio 0 is accepted when u = 0). NaN ratios are never accepted."""
    r = torch.nan_to_num(ratio, nan=-1.0)
    if uniform_bits is None:
        return r.clamp(0.0, 1.0)
    scale = float(2**uniform_bits)
    return torch.where(r < 0, 0.0, ((torch.floor(r.clamp(max=1.0) * scale) + 1.0) / scale).clamp(max=1.0))


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


# ---- inputs -------------------------------------------------------------------------------------

def prob_tolerance(fmt: FloatFormat, V: int) -> float:
    """How far from 1 the sum of V probabilities each correctly rounded to ``fmt`` and summed in
    ``fmt`` (any order) can be: gamma_{V+1} = (V+1)u / (1 - (V+1)u), u = eps/2, plus V half
    subnormals of underflow (Higham, Accuracy and Stability, Lemma 3.1 and section 4.2)."""
    nu = (V + 1) * fmt.eps / 2
    return (nu / (1 - nu) if nu < 1 else _INF) + V * fmt.smallest_subnormal / 2


def check_probs(p: torch.Tensor, fmt: FloatFormat, param: str) -> None:
    """Every row of ``p`` (..., V) is finite, >= 0 and sums to 1 within :func:`prob_tolerance`."""
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()):
        bad = p[~torch.isfinite(p) | (p < 0)][0].item()
        raise bad_value(param, f"a row holding {bad}", "finite probabilities >= 0")
    tol = prob_tolerance(fmt, p.shape[-1])
    sums = p.sum(dim=-1).reshape(-1)
    worst = int(torch.argmax((sums - 1).abs()))
    if abs(sums[worst].item() - 1) > tol:
        raise bad_value(f"{param} row {worst}", f"sum {sums[worst].item():.17g}",
                        f"rows summing to 1 within {fmt.name}'s tolerance {tol:.3g}")


def _rows(x, n: int, V: int | None, param: str) -> torch.Tensor:
    t = torch.as_tensor(x).double()
    if t.dim() == 1:
        t = t.expand(n, t.shape[0])
    if t.dim() != 2 or t.shape[0] != n or (V is not None and t.shape[1] != V) or t.shape[1] < 1:
        want = f"({n}, {V if V else 'V'}) or (V,)"
        raise bad_value(f"{param}.shape", tuple(torch.as_tensor(x).shape), want)
    return t


@dataclass(frozen=True)
class _Prepared:
    p: torch.Tensor  # (k+1, V) exact target
    p_hat: torch.Tensor  # (k+1, V) emulated target probabilities
    q_hat: torch.Tensor  # (k, V) emulated draft probabilities (what the verifier reads)
    q_draw: torch.Tensor  # (k, V) the distribution the draft samples from

    @property
    def k(self) -> int:
        return self.q_hat.shape[0]


def _prepare(target, draft, k: int | None, kind: str, proc: SpecProcedure) -> _Prepared:
    if kind not in ("logits", "probs"):
        raise bad_value("kind", kind, "'logits' or 'probs'")
    t0, d0 = torch.as_tensor(target), torch.as_tensor(draft)
    if k is None:
        k = t0.shape[0] - 1 if t0.dim() == 2 else (d0.shape[0] if d0.dim() == 2 else 1)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise bad_value("k", k, "an integer >= 1 (draft tokens per step)")
    t = _rows(t0, k + 1, None, "target")
    d = _rows(d0, k, t.shape[1], "draft")
    fmt, dfmt = proc.format, proc.draft_format or proc.format
    if kind == "logits":
        for name, x in (("target", t), ("draft", d)):
            if bool(torch.isnan(x).any()) or bool((x == _INF).any()) or not bool(torch.isfinite(x.amax(-1)).all()):
                raise bad_value(f"{name} logits", "a row with NaN, +inf or no finite value",
                                "finite logits (-inf masks a token)")
        p = torch.softmax(t, dim=-1)
        return _Prepared(p=p, p_hat=softmax_in(t, fmt), q_hat=softmax_in(d, fmt), q_draw=softmax_in(d, dfmt))
    check_probs(t, fmt, "target probabilities")
    check_probs(d, fmt, "draft probabilities")
    return _Prepared(p=t / t.sum(-1, keepdim=True), p_hat=round_to(t, fmt), q_hat=round_to(d, fmt),
                     q_draw=round_to(d, dfmt))


# ---- the exact law of one step ------------------------------------------------------------------

@dataclass(frozen=True)
class SpecLaw:
    """The exact law of one emulated step (float64).

    ``accept`` (k, V): P(alive at j, draft x, accepted) / P(alive at j); ``reject`` (k, V): P(rejected
    at j and y emitted) / P(alive at j); ``fail`` (k,): P(rejected at j onto a 0/0 residual) / P(alive
    at j) under ``zero_residual='fail'``; ``bonus`` (V,); ``plain`` (k+1, V): plain sampling from p^;
    ``target`` (k+1, V): the exact target.
    """

    accept: torch.Tensor
    reject: torch.Tensor
    fail: torch.Tensor
    bonus: torch.Tensor
    plain: torch.Tensor
    target: torch.Tensor

    @property
    def k(self) -> int:
        return self.accept.shape[0]

    @property
    def V(self) -> int:
        return self.accept.shape[1]

    def alive(self) -> torch.Tensor:
        """(k+1,): P(the step reaches position j), j = 0..k (k: the bonus)."""
        acc = self.accept.sum(-1)
        return torch.cat([acc.new_ones(1), torch.cumprod(acc, 0)])

    def first_token_tv(self) -> float:
        """TV of the first emitted token's law to the exact target (the fail mass counts)."""
        first = self.accept[0] + self.reject[0] if self.k else self.bonus
        return 0.5 * ((first - self.target[0]).abs().sum().item() + self.fail[0].item())


def _law(w: torch.Tensor, noise: Noise, what: str) -> torch.Tensor:
    law = race_law(w, noise)
    if law is None:
        raise bad_value(what, "an all-zero row", "a distribution with some positive probability")
    return law


def spec_law(target, draft, *, procedure: SpecProcedure | None = None, k: int | None = None,
             kind: str = "logits") -> SpecLaw:
    """The exact law of one speculative step under ``procedure``.

    ``target`` (k+1, V) or (V,), ``draft`` (k, V) or (V,): logits (``kind='logits'``) or
    probabilities (``kind='probs'``, validated against the format's tolerance, then rounded at
    ``probs``); a 1-D row is used at every position (give ``k``).
    """
    proc = procedure or SpecProcedure()
    pr = _prepare(target, draft, k, kind, proc)
    fmt, noise, k = proc.format, proc.noise, pr.k
    d = torch.stack([_law(pr.q_draw[j], noise, "draft distribution") for j in range(k)])  # (k, V)
    a = accept_prob(ratio_in(pr.p_hat[:k], pr.q_hat, fmt, proc.q_zero), proc.uniform_bits)
    A = d * a
    R = (d * (1 - a)).sum(-1)  # (k,) rejection mass per position
    r_hat, s = residual_in(pr.p_hat[:k], pr.q_hat, fmt)
    E = torch.zeros_like(A)
    F = torch.zeros(k, dtype=torch.float64)
    for j in range(k):
        if s[j, 0] > 0:
            E[j] = R[j] * _law(r_hat[j], noise, "residual")
        elif proc.zero_residual == "first":
            E[j, 0] = R[j]  # argmax over all-zero scores is token 0
        elif proc.zero_residual == "target":
            E[j] = R[j] * _law(pr.p_hat[j], noise, "target distribution")
        else:
            F[j] = R[j]
    plain = torch.stack([_law(pr.p_hat[j], noise, "target distribution") for j in range(k + 1)])
    return SpecLaw(accept=A, reject=E, fail=F, bonus=plain[k], plain=plain, target=pr.p)


def _completed_abs_sum(heads: torch.Tensor, errs: torch.Tensor, last: torch.Tensor, P: torch.Tensor) -> float:
    """sum |D| over the V**(k+1) completed outcomes, D = D_0 with D_k = ``last`` and
    D_j = heads_j (x) D_{j+1} + errs_j (x) T_{j+1}, T_j = P_j (x) ... (x) P_k (outer products)."""
    k = heads.shape[0]
    D, T = last, P[k]
    for j in range(k - 1, 0, -1):
        D = (heads[j][:, None] * D[None, :] + errs[j][:, None] * T[None, :]).reshape(-1)
        T = (P[j][:, None] * T[None, :]).reshape(-1)
    total = 0.0
    rows = max(1, (1 << 21) // D.numel())  # the outermost level in slices: never V**(k+1) at once
    buf = torch.empty(rows, D.numel(), dtype=D.dtype)
    for a0 in range(0, heads.shape[1], rows):
        h, e = heads[0, a0:a0 + rows, None], errs[0, a0:a0 + rows, None]
        out = buf[: h.shape[0]]
        torch.mul(h, D[None, :], out=out).addcmul_(e, T[None, :])
        total += out.abs_().sum().item()
    return total


@dataclass(frozen=True, kw_only=True)
class SpecTV:
    """Total-variation distances to the exact target of one step (completed to k+1 tokens)."""

    tv: float  # the speculative step
    tv_plain: float  # plain sampling from p^ in the same format (the baseline)
    tv_first: float  # the first emitted token alone
    fail: float  # probability of a 0/0 residual under zero_residual='fail'
    expected_tokens: float  # mean tokens emitted per step


def spec_tv(target, draft, *, procedure: SpecProcedure | None = None, k: int | None = None,
            kind: str = "logits") -> SpecTV:
    """The step's exact TV to the target by enumerating V**(k+1) outcomes (see the module docstring).

    Raises AttnumInputError when V**(k+1) exceeds :data:`MAX_OUTCOMES`; :func:`simulate` is the
    Monte-Carlo path for such vocabularies, ``spec_law(...).first_token_tv()`` the per-position one.
    """
    law = spec_law(target, draft, procedure=procedure, k=k, kind=kind)
    k, V = law.k, law.V
    if V ** (k + 1) > MAX_OUTCOMES:
        raise AttnumInputError(
            f"vocab={V}, k={k}: {V}**{k + 1} outcomes exceed the enumeration budget 2**27; use the "
            "Monte-Carlo path attnum.sampling.simulate (or spec_law(...).first_token_tv() per position)")
    P = law.target
    alive = law.alive()
    fail = float((alive[:k] * law.fail).sum())
    errs = law.accept + law.reject - P[:k]
    tv = 0.5 * (_completed_abs_sum(law.accept, errs, law.bonus - P[k], P) + fail)
    tv_plain = 0.5 * _completed_abs_sum(law.plain[:k], law.plain[:k] - P[:k], law.plain[k] - P[k], P)
    return SpecTV(tv=tv, tv_plain=tv_plain, tv_first=law.first_token_tv(), fail=fail,
                  expected_tokens=float(alive[1:].sum() + 1.0 - fail))


# ---- the step's output as a block of tokens (the auditor's cells) -------------------------------

def block_cells(k: int, V: int) -> int:
    """Number of distinct blocks a step can emit: n accepted drafts then one token, n = 0..k."""
    return sum(V ** (n + 1) for n in range(k + 1))


def block_law(law: SpecLaw) -> torch.Tensor:
    """(cells,) P(block) for every block (x_1..x_n, y), ordered by n, then base-V with x_1 first.
    The fail mass (if any) is missing: the cells sum to 1 - P(fail)."""
    parts, alive = [], torch.ones(1, dtype=torch.float64)
    for n in range(law.k + 1):
        last = law.reject[n] if n < law.k else law.bonus
        parts.append((alive[:, None] * last[None, :]).reshape(-1))
        if n < law.k:
            alive = (alive[:, None] * law.accept[n][None, :]).reshape(-1)
    return torch.cat(parts)


def block_index(tokens: torch.Tensor, V: int) -> torch.Tensor:
    """Cell ids (B,) of blocks ``tokens`` (B, k+1): emitted tokens then -1 padding.

    Raises AttnumInputError naming the first offending row for a token outside 0..V-1, padding
    before a token, or an empty block.
    """
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise bad_value("sampler output", f"{tuple(tokens.shape)} {tokens.dtype}", "(B, k+1) integer tokens")
    tokens = tokens.long()
    B, k1 = tokens.shape
    pad = tokens == -1
    bad = ((tokens < -1) | (tokens >= V)).any(-1) | pad[:, 0] | (pad[:, :-1] & ~pad[:, 1:]).any(-1)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0])
        raise bad_value(f"sampler output row {row}", tokens[row].tolist(),
                        f"tokens in 0..{V - 1} followed by -1 padding, at least one token")
    length = (~pad).sum(-1)  # n + 1
    idx = torch.zeros(B, dtype=torch.int64)
    for j in range(k1):
        idx = torch.where(j < length, idx * V + tokens[:, j].clamp(min=0), idx)
    offsets = torch.tensor([0] + [V ** (n + 1) for n in range(k1)], dtype=torch.int64).cumsum(0)
    return offsets[length - 1] + idx


# ---- samplers -----------------------------------------------------------------------------------

def reference_sampler(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """attnum's speculative sampler in the auditor's protocol, textbook form, float64.

    target_probs (B, k+1, V), draft_probs (B, k, V), draft_tokens (B, k) drawn from draft_probs ->
    (B, k+1) int64: the accepted drafts, then the resampled or bonus token, then -1 padding.
    """
    p, q = target_probs.double(), draft_probs.double()
    B, k1, V = p.shape
    k = k1 - 1
    x = draft_tokens.long()
    p_x = p[:, :k].gather(-1, x[..., None])[..., 0]
    q_x = q.gather(-1, x[..., None])[..., 0]
    u = torch.rand((B, k), generator=generator, dtype=torch.float64)
    accepted = u * q_x < p_x  # u < min(1, p/q) without dividing
    n = torch.cumprod(accepted.long(), -1).sum(-1)  # drafts accepted before the first rejection
    rows = torch.arange(B)
    p_n = p[rows, n]
    w = torch.where((n < k)[:, None], (p_n - q[rows, n.clamp(max=k - 1)]).clamp(min=0), p_n)
    w = torch.where(w.sum(-1, keepdim=True) > 0, w, p_n)  # float64 0/0 (p == q up to rounding): p
    y = torch.multinomial(w, 1, generator=generator)[:, 0]
    out = torch.cat([x, x.new_zeros(B, 1)], -1)
    pos = torch.arange(k1)[None, :]
    out = torch.where(pos < n[:, None], out, -1)
    out[rows, n] = y
    return out


def _draw(w: torch.Tensor, n: int, noise: Noise, generator) -> torch.Tensor:
    """n categorical draws from weights w (V,): multinomial, or a real race with clamped noise."""
    if noise.exact:
        return torch.multinomial(w / w.sum(), n, replacement=True, generator=generator)
    E = torch.empty(n, w.shape[0], dtype=torch.float64).exponential_(generator=generator)
    return torch.argmax(w[None, :] / E.clamp_(noise.floor, noise.cap), dim=-1)  # ties: first index


def simulate(target, draft, n: int, *, procedure: SpecProcedure | None = None, k: int | None = None,
             kind: str = "logits", generator: torch.Generator | None = None, batch: int = 1 << 14) -> torch.Tensor:
    """Monte-Carlo of the emulated step: (n, k+1) blocks (-1 padding; -2 marks a 0/0 failure).

    The arithmetic is the procedure's (rounded p^, q^, ratio, residual); the randomness is real:
    race noise drawn and clamped, the acceptance uniform drawn on its grid. An independent check of
    :func:`spec_law`, and the path for vocabularies too large to enumerate.
    """
    proc = procedure or SpecProcedure()
    pr = _prepare(target, draft, k, kind, proc)
    k, fmt, noise, b = pr.k, proc.format, proc.noise, proc.uniform_bits
    ratio = ratio_in(pr.p_hat[:k], pr.q_hat, fmt, proc.q_zero)
    r_hat, s = residual_in(pr.p_hat[:k], pr.q_hat, fmt)
    blocks = []
    for b0 in range(0, n, batch):
        B = min(batch, n - b0)
        out = torch.full((B, k + 1), -1, dtype=torch.int64)
        alive = torch.ones(B, dtype=torch.bool)
        for j in range(k):
            x = _draw(pr.q_draw[j], B, noise, generator)
            if b is None:
                u = torch.rand(B, generator=generator, dtype=torch.float64)
                acc = u < ratio[j][x]
            else:
                u = torch.randint(0, 2**b, (B,), generator=generator, dtype=torch.int64).double() / 2.0**b
                acc = u <= ratio[j][x]
            if s[j, 0] > 0:
                y = _draw(r_hat[j], B, noise, generator)
            elif proc.zero_residual == "first":
                y = torch.zeros(B, dtype=torch.int64)
            elif proc.zero_residual == "target":
                y = _draw(pr.p_hat[j], B, noise, generator)
            else:
                y = torch.full((B,), -2, dtype=torch.int64)
            out[:, j] = torch.where(alive, torch.where(acc, x, y), out[:, j])
            alive = alive & acc
        bonus = _draw(pr.p_hat[k], B, noise, generator)
        out[:, k] = torch.where(alive, bonus, -1)
        blocks.append(out)
    return torch.cat(blocks)


# ---- greedy verification (temperature 0) --------------------------------------------------------

def greedy_verify(target_logits: torch.Tensor, draft_token: int, fmt: str | FloatFormat) -> tuple[int, int]:
    """(plain greedy's token, speculative greedy's token) at one position, logits (V,) in ``fmt``.

    Plain greedy is argmax (ties: the first index, as torch). Speculative greedy accepts the draft
    token when its logit is a maximum (a rank computed with ``>=``, vLLM issue 7627), else emits the
    argmax. They differ exactly when the draft token ties the maximum at a later index.
    """
    l = round_to(torch.as_tensor(target_logits).double(), get_format(fmt))
    plain = int(torch.argmax(l))
    spec = draft_token if bool(l[draft_token] >= l.max()) else plain
    return plain, spec


def greedy_ties(logits: torch.Tensor, fmt: str | FloatFormat) -> dict[str, float]:
    """For logit rows (n, V) in float64: the fraction of rows whose maximum is tied once rounded to
    ``fmt`` (greedy then rests on a tie-break rule), whose top two lie within one ulp (a one-ulp
    difference between two computations of the logits, e.g. batch-variant GEMMs, can swap them),
    and whose argmax in ``fmt`` differs from the float64 argmax."""
    from attnum.metrics import ulp

    fmt = get_format(fmt)
    x = torch.as_tensor(logits).double()
    l = round_to(x, fmt)
    top = torch.topk(l, 2, dim=-1).values
    tie = top[:, 0] == top[:, 1]
    near = (top[:, 0] - top[:, 1]) <= ulp(top[:, 0], fmt)
    flip = torch.argmax(l, -1) != torch.argmax(x, -1)
    return {"tie_rate": tie.double().mean().item(), "near_tie_rate": near.double().mean().item(),
            "flip_rate": flip.double().mean().item()}
