"""The procedure of one speculative step, its exact law (float64 from the emulated values), its TV
to the exact target by enumeration, and the step's output as cells of emitted blocks.

Shape alphabet: V vocabulary, k draft tokens, B a batch of blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.errors import AttnumInputError, bad_value
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.rounding import round_to
from attnum.sampling.emulate import accept_prob, check_probs, ratio_in, residual_in, softmax_in
from attnum.sampling.noise import Noise, get_noise, race_law

Q_ZERO = ("reject", "accept")  # vLLM: `draft_prob > 0 and ...` rejects; p/0 = inf accepts
ZERO_RESIDUAL = ("fail", "first", "target")
MAX_OUTCOMES = 2**27  # V**(k+1) enumerated outcomes: ~1 GB of float64 work at most
_INF = math.inf


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
