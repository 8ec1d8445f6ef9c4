"""Partial attention states (O, LSE) and their merge, as split-KV, cascade and ring attention use it.

Shape alphabet: ``...`` any leading shape (e.g. B, H, N or FlashInfer's seq, heads), dv value dim,
n the number of states merged.

A *state* over a set of keys K is ``State(o, lse)``: ``o`` (..., dv) = softmax over K applied to V,
``lse`` (...) = log_b sum_{j in K} b**s_j, in base ``b`` = e (flash-attn, vLLM, torch) or 2 (FlashInfer,
which scales the scores by log2(e) and uses exp2/log2 throughout). States over disjoint key sets merge
exactly (in exact arithmetic) into the state over their union::

    m = max_i lse_i,  e_i = b**(lse_i - m),  d = sum_i e_i,
    O = sum_i (e_i / d) O_i,  LSE = m + log_b d.

The empty state (no key) is ``(0, -inf)``. This module's merges are exact on it, whatever the
arithmetic: ``empty (+) s == s`` bit for bit (signed zeros included; the O of an empty state is never
read, so garbage there does not leak), and ``empty (+) empty == (0, -inf)``, never NaN. The running max
of an all-empty merge is replaced by 0 before subtracting (FlashAttention's ``m_safe``, FA3's combine
kernel ``lse_max_cur = 0``), so no ``-inf - (-inf)`` is ever formed, and a zero weight contributes
nothing (the accumulator starts at -0.0, the additive identity of IEEE arithmetic).

Empty-row conventions. ``empty_lse=-inf`` (default) is FlashInfer
after PR #4401, FA3, FA2's split partials and FlashMLA's kernels. ``empty_lse=+inf`` is FA2's non-split
forward (``softmax.h``: ``Split ? -INFINITY : INFINITY``) and FlashMLA's test references: under it an
input LSE of +inf marks an empty state (mapped to -inf on load, as vLLM's ``merge_attn_states`` does)
and an empty result is written as +inf. Mixing them is a bug: a +inf LSE merged under the -inf
convention means "infinite mass" and poisons the merge with NaN (flash-attention#978). A finite
*sentinel* (``empty_lse`` <= :data:`SENTINEL_MAX`, e.g. FlashInfer's -5e4 before PR #4401, which the
Triton ``merge_states`` of flashinfer 0.7.2 still starts from): an input LSE at or below it marks an
empty state (mapped to -inf on load) and an empty result is written as the sentinel.

Rounding sites of the merge (its own :class:`attnum.numerics.policy.Policy`, default ``fp32``: every kernel
merges in fp32):

========== ==========================================================================================
inputs     each state's O as loaded (ring-flash-attn's bf16 block outputs: ``inputs=bf16``)
lse        each state's LSE as loaded, and the merged LSE m + log_b d
rescale    the weights: e_i = b**(lse_i - m), and e_i / d (``ratio``) or b**(lse_i - LSE) (``lse``);
           for ``online`` the running correction b**(m_old - m_new)
row_sum    d, the sum of the e_i (summed in the order given)
acc        each weighted term w_i O_i and the running sum of them
out        the merged O
========== ==========================================================================================

Methods (the order of the states is the order given; merges are associative only in exact arithmetic):

- ``ratio``: w_i = e_i / d, O = sum_i w_i O_i (FlashInfer ``merge_state``/``MergeStateKernel``, vLLM
  ``merge_attn_states``; n-way, the same two passes);
- ``lse``: LSE first, then w_i = b**(lse_i - LSE) (flash-attn's split-KV combine kernels, FA2/FA3);
- ``online``: a running (m, d, O) rescaled state by state, divided by d once at the end (FlashInfer
  ``merge_states``' ``state_t::merge`` loop).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from attnum.attention import steps
from attnum.errors import bad_value
from attnum.numerics.policy import Policy, parse_policy
from attnum.numerics.rounding import round_to

LSE_BASES = ("e", 2)
METHODS = ("ratio", "lse", "online")
EMPTY_LSE = (-math.inf, math.inf)
SENTINEL_MAX = -1000.0  # a finite empty-state sentinel lies at or below this (FlashInfer's was -5e4)
LOG2E = 1.0 / math.log(2.0)  # log2(e): natural LSE -> base 2 (FlashInfer's "x ln2" the other way)
NEG_INF = -math.inf


class State(NamedTuple):
    """A partial attention state: o (..., dv) normalised over its keys, lse (...) in some base."""

    o: torch.Tensor
    lse: torch.Tensor


def parse_lse_base(base: object) -> str | int:
    """Canonical LSE base: ``"e"`` (natural) or ``2``; anything else is an AttnumInputError."""
    if base in ("e", "E", "natural"):
        return "e"
    if base in (2, "2", 2.0):
        return 2
    raise bad_value("lse_base", base, "'e' (natural: flash-attn, vLLM, torch) or 2 (FlashInfer)")


def empty_convention(empty_lse: float) -> float:
    """-inf, +inf or a finite sentinel <= SENTINEL_MAX: the LSE an empty state carries (module docstring)."""
    try:
        v = float(empty_lse)
    except (TypeError, ValueError):
        v = math.nan
    if v not in EMPTY_LSE and not (math.isfinite(v) and v <= SENTINEL_MAX):
        raise bad_value("empty_lse", empty_lse, "-inf (FlashInfer, FA3, FA2 split partials), +inf "
                        f"(FA2's non-split forward) or a finite sentinel <= {SENTINEL_MAX:g} (FlashInfer's old -5e4)")
    return v


def convert_lse(lse: torch.Tensor, src: object, dst: object) -> torch.Tensor:
    """The same log-sum-exp in another base: log2(x) = ln(x) * log2(e). Unrounded (the caller's site
    rounds it); +-inf stay +-inf."""
    src, dst = parse_lse_base(src), parse_lse_base(dst)
    if src == dst:
        return lse
    return lse * LOG2E if dst == 2 else lse / LOG2E


def empty_state(shape: Sequence[int], dv: int, *, dtype: torch.dtype = torch.float32, device=None,
                empty_lse: float = NEG_INF) -> State:
    """The state over no keys: o = 0 (..., dv), lse = ``empty_lse`` (...)."""
    return State(torch.zeros(*shape, dv, dtype=dtype, device=device),
                 torch.full(tuple(shape), empty_convention(empty_lse), dtype=dtype, device=device))


def _exp(x: torch.Tensor, base) -> torch.Tensor:
    return torch.exp(x) if base == "e" else torch.exp2(x)


def _log(x: torch.Tensor, base) -> torch.Tensor:
    return torch.log(x) if base == "e" else torch.log2(x)


def _load(states: Sequence, policy: Policy, empty_lse: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(O (n, ..., dv), LSE (n, ...)) in the carrier: O rounded at ``inputs``, LSE at ``lse``, each once
    from its own values; +inf LSEs mapped to -inf under the +inf convention."""
    if not isinstance(states, (list, tuple)) or not states:
        raise bad_value("states", type(states).__name__, "a non-empty list of (o, lse) states")
    c = policy.carrier
    os_, ls_ = [], []
    for i, st in enumerate(states):
        if not (isinstance(st, (tuple, list)) and len(st) == 2 and all(isinstance(t, torch.Tensor) for t in st)):
            raise bad_value(f"states[{i}]", type(st).__name__, "an (o, lse) pair of tensors")
        o, lse = st
        if not (o.is_floating_point() and lse.is_floating_point()):
            raise bad_value(f"states[{i}].dtype", (o.dtype, lse.dtype), "floating o and lse")
        if o.dim() < 1 or tuple(o.shape[:-1]) != tuple(lse.shape):
            raise bad_value(f"states[{i}].shape", (tuple(o.shape), tuple(lse.shape)),
                            "o (..., dv) and lse (...) with the same leading shape")
        if i and (o.shape != os_[0].shape):
            raise bad_value(f"states[{i}].o.shape", tuple(o.shape), f"the shape of states[0].o {tuple(os_[0].shape)}")
        os_.append(steps.load_input(o, policy))
        ls_.append(round_to(lse.double(), policy.lse).to(c))  # exact widening, then the one rounding
    o_n, lse_n = torch.stack(os_), torch.stack(ls_)
    if empty_lse == math.inf:
        lse_n = lse_n.masked_fill(lse_n == math.inf, NEG_INF)  # vLLM: +-inf LSE -> -inf (empty)
    elif math.isfinite(empty_lse):  # a sentinel: at or below it is empty
        lse_n = lse_n.masked_fill(lse_n <= empty_lse, NEG_INF)
    return o_n, lse_n


def _weighted_sum(w_n: torch.Tensor, o_n: torch.Tensor, policy: Policy) -> torch.Tensor:
    """sum_i w_i O_i in order, rounded at ``acc``; zero weights are skipped, so an empty state's O
    (possibly garbage) is never read and the sum of one term is that term exactly."""
    acc = torch.full(o_n.shape[1:], -0.0, dtype=o_n.dtype, device=o_n.device)
    for w, o in zip(w_n.unsqueeze(-1), o_n):
        term = policy.round("acc", w * o)
        acc = torch.where(w == 0, acc, policy.round("acc", acc + term))
    return acc


def _finish(o: torch.Tensor, lse: torch.Tensor, empty: torch.Tensor, policy: Policy, empty_lse: float) -> State:
    o = policy.round("out", o).masked_fill(empty.unsqueeze(-1), 0.0)
    return State(o, lse.masked_fill(empty, empty_lse))


def merge_states(states: Sequence, *, policy: str | Policy = "fp32", lse_base: object = "e",
                 empty_lse: float = NEG_INF, method: str = "ratio") -> State:
    """Merge n states (each ``(o (..., dv), lse (...))``) in the order given -> ``State`` in the carrier.

    ``policy``: the merge's rounding sites (module docstring), default fp32 as every kernel merges;
    ``lse_base``: ``"e"`` or 2, the base of every input LSE and of the result; ``empty_lse``: -inf,
    +inf or a finite sentinel, the empty-state convention; ``method``: ``ratio``, ``lse`` or ``online``.
    """
    policy = parse_policy(policy)
    base = parse_lse_base(lse_base)
    empty_lse = empty_convention(empty_lse)
    if method not in METHODS:
        raise bad_value("method", method, f"one of {METHODS}")
    o_n, lse_n = _load(states, policy, empty_lse)
    if method == "online":
        return _online(o_n, lse_n, policy, base, empty_lse)
    m = lse_n.amax(dim=0)
    empty = m == NEG_INF
    m_safe = m.masked_fill(empty, 0.0)  # all-empty: no -inf - (-inf)
    e_n = policy.round("rescale", _exp(lse_n - m_safe, base))  # e_i = b^(lse_i - m); empty -> 0
    d = e_n[0]
    for e in e_n[1:]:
        d = policy.round("row_sum", d + e)
    lse = policy.round("lse", m_safe + _log(d, base))  # d = 0 (all empty) -> -inf, masked below anyway
    if method == "ratio":
        w_n = policy.round("rescale", torch.where(d > 0, e_n / d, torch.zeros_like(e_n)))
    else:  # "lse": flash-attn's combine, w_i = b^(lse_i - LSE)
        w_n = policy.round("rescale", _exp(lse_n - lse.masked_fill(empty, 0.0), base))
        w_n = w_n.masked_fill(e_n == 0, 0.0)  # an empty state weighs nothing, whatever LSE rounding did
    return _finish(_weighted_sum(w_n, o_n, policy), lse, empty, policy, empty_lse)


def _online(o_n, lse_n, policy: Policy, base, empty_lse: float) -> State:
    """FlashInfer's ``merge_states``: a running (m, d, acc), state by state, one division at the end."""
    m = torch.full(lse_n.shape[1:], NEG_INF, dtype=lse_n.dtype, device=lse_n.device)
    d = torch.zeros_like(m)
    acc = torch.full(o_n.shape[1:], -0.0, dtype=o_n.dtype, device=o_n.device)
    for o, lse in zip(o_n, lse_n):
        m_new = torch.maximum(m, lse)
        m_safe = m_new.masked_fill(m_new == NEG_INF, 0.0)
        alpha = policy.round("rescale", _exp(m - m_safe, base))  # b^(m_old - m_new); 0 for an empty run
        beta = policy.round("rescale", _exp(lse - m_safe, base))  # this state's weight; 0 if empty
        d = policy.round("row_sum", policy.round("row_sum", alpha * d) + beta)
        a, b = alpha.unsqueeze(-1), beta.unsqueeze(-1)
        scaled = torch.where(a == 0, torch.full_like(acc, -0.0), policy.round("acc", a * acc))
        acc = torch.where(b == 0, scaled, policy.round("acc", scaled + policy.round("acc", b * o)))
        m = m_new
    empty = m == NEG_INF
    o = torch.where(d.unsqueeze(-1) > 0, acc / d.unsqueeze(-1), torch.zeros_like(acc))
    lse = policy.round("lse", m.masked_fill(empty, 0.0) + _log(d, base))
    return _finish(o, lse, empty, policy, empty_lse)


def merge_state(a, b, *, policy: str | Policy = "fp32", lse_base: object = "e", empty_lse: float = NEG_INF,
                method: str = "ratio") -> State:
    """``a (+) b`` for two states ``(o (..., dv), lse (...))``: :func:`merge_states` of ``[a, b]``
    (FlashInfer's ``merge_state(v_a, s_a, v_b, s_b)`` with ``lse_base=2``)."""
    return merge_states([a, b], policy=policy, lse_base=lse_base, empty_lse=empty_lse, method=method)
