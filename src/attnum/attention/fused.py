"""Fused flash tile steps: the element-wise chain of a tile as compiled passes instead of ~8 torch ops.

Shape alphabet: B batch, H heads, N queries, C keys in the tile, dv value dim, R = B*H*N rows.

Per key/value tile the unfused step (:mod:`attnum.attention.flash_forward`) runs the scale, the
``scores`` rounding, the mask, the row max, the subtraction, exp, the ``exp`` and ``probs`` roundings,
the row sum, the rescale and the accumulation as separate passes over the tile. Here:

1. one compiled pass (:func:`fused_kernels.scores_shift_`): scale, ``scores`` rounding, additive
   mask and its rounding, -inf masking, the row max (or Qiu-Yao's shift), and s - m, in place;
2. torch's ``exp_`` (kept: its bits are torch's own -- Sleef or MKL VML, chosen by the build and the
   CPU -- and no other compiler reproduces them);
3. one compiled pass rounding P at ``exp`` in place and, when needed, at ``probs`` into a copy;
4. torch's row sum (kept for the same reason: its summation order is torch's vectorized one);
5. the P V matmul, then one compiled pass for the accumulator update (fa2) or the normalized
   output (fa1), every ``acc``/``out`` rounding inside.

The unfused step is the reference: ``ATTNUM_JIT=0`` runs it, and ``tests/attention/test_fused.py`` holds the
two equal bit for bit (policy presets, site overrides, both variants, masks, GQA, Qiu-Yao).

FA4's conditional rescaling and software exp2 (``rescale_threshold``, ``exp2=polyN``) keep their torch
steps (:mod:`attnum.attention.lowbit.fa4_steps`) between the compiled scores and rounding passes.

Not fused (the unfused step runs; :func:`why_unfused` names the reason, ``attnum.attention.fused.UNFUSED``
lists them): ``ATTNUM_JIT=0`` or numba missing; a non-CPU device; SageAttention policies (``lowbit``,
their own kernel); a site whose format does not fit the carrier.

The backward (:mod:`attnum.attention.flash_backward`) fuses the same way per KV tile
(:func:`backward_tile`): scale, ``scores`` rounding, mask and s - LSE in one pass; torch's exp;
the ``exp``/``probs`` roundings in one pass; dS = round(P (round(dP) - D)) in one pass; the dQ update in one.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from attnum.attention import steps
from attnum.attention.fused_kernels import site_args
from attnum.numerics import jit
from attnum.numerics.formats import PRESETS
from attnum.numerics.policy import SITES, Policy

UNFUSED = (
    "ATTNUM_JIT=0 or numba not importable",
    "device other than cpu",
    "lowbit (SageAttention policies)",
    "a site format that does not fit the carrier",
)


def why_unfused(policy: Policy, device: torch.device | str = "cpu") -> str | None:
    """None when the fused forward step applies to ``policy`` on ``device``, else the entry of
    :data:`UNFUSED` that stops it."""
    if not jit.enabled():
        return UNFUSED[0]
    if torch.device(device).type != "cpu":
        return UNFUSED[1]
    return _why_unfused_policy(policy)


@functools.lru_cache(maxsize=64)
def _why_unfused_policy(policy: Policy) -> str | None:
    if policy.lowbit is not None:
        return UNFUSED[2]
    carrier = _carrier_fmt(policy)
    if not all(getattr(policy, s).fits_in(carrier) and (carrier.fits_in(getattr(policy, s)) or getattr(policy, s).mbits < 52)
               for s in SITES):
        return UNFUSED[3]
    return None


def _carrier_fmt(policy: Policy):
    return PRESETS["fp32"] if policy.carrier == torch.float32 else PRESETS["fp64"]


def _mask_arrays(tile, shape, dt):
    """(additive, use_add, keep, use_keep) as 4-D numpy views broadcast to ``shape`` (no copies)."""
    dummy_add, dummy_keep = np.zeros((1, 1, 1, 1), dt), np.ones((1, 1, 1, 1), np.bool_)
    add = tile.additive.expand(shape).numpy() if tile.additive is not None else dummy_add
    keep = tile.keep.expand(shape).numpy() if tile.keep is not None else dummy_keep
    return add, tile.additive is not None, keep, tile.keep is not None


def backward_tile(q, k_j, v_j, do, tile, scale: float, lse, D, policy: Policy):
    """One KV tile of Algorithm 2 up to dS: (P_j on the exp grid, P_j as fed to dV, dS_j), the
    bits of :func:`attnum.attention.flash_backward.flash_backward`'s unfused lines 10-14."""
    from attnum.attention.fused_kernels import ds_, sub_rows_

    s = steps.matmul(q, k_j.transpose(-1, -2), policy).contiguous()
    _scores_pass(s, tile, scale, policy)
    C = s.shape[-1]
    R = s.numel() // max(1, C)
    sub_rows_(s.view(R, C).numpy(), lse.expand(*s.shape[:-1], 1).reshape(R).contiguous().numpy())
    p = _round_site_(s.exp_(), policy, "exp")
    p_in = _round_site_(p.clone(), policy, "probs") if not policy.exp.fits_in(policy.probs) else p
    carrier = _carrier_fmt(policy)
    dp = steps.matmul(do, v_j.transpose(-1, -2), policy).contiguous()
    ds_(dp.view(R, C).numpy(), p.view(R, C).numpy(), D.expand(*dp.shape[:-1], 1).reshape(R).contiguous().numpy(),
        site_args(policy.scores, carrier), site_args(policy.probs, carrier))
    return p, p_in, dp


def acc_add_(acc, x, policy: Policy):
    """acc <- round(acc + round(x, acc), acc) in place (the backward's dQ update)."""
    from attnum.attention.fused_kernels import acc_update_

    R, dv = acc.numel() // acc.shape[-1], acc.shape[-1]
    ones = np.ones(R, np.float32 if acc.dtype == torch.float32 else np.float64)
    acc_update_(acc.view(R, dv).numpy(), ones, x.contiguous().view(R, dv).numpy(), site_args(policy.acc, _carrier_fmt(policy)))
    return acc


def _scores_shift(q, k_j, tile, scale, m, policy: Policy, fa2: bool, buf):
    """S_j = Q K_j^T (the policy's matmul), pass 1 when anything is to do (scale, ``scores``
    rounding, masks), then the row max and shift pass; returns (s - shift in place, m~ (B, H, N, 1))."""
    from attnum.attention.fused_kernels import shift_

    s = steps.matmul(q, k_j.transpose(-1, -2), policy, out=buf).contiguous()
    _scores_pass(s, tile, scale, policy)
    m_blk = s.new_empty(s.shape[:-1] + (1,))  # written by shift_: the row max, as torch's amax
    dt = np.float32 if s.dtype == torch.float32 else np.float64
    qy = policy.max_shift == "qiu-yao"
    limit = steps.shift_limit(policy) if qy else 0.0
    C = s.shape[-1]
    R = s.numel() // C
    s_RC = s.view(R, C).numpy()
    shift_(s_RC, s_RC.view(np.int32 if dt is np.float32 else np.int64), m_blk.view(R).numpy(),
           m.reshape(R).contiguous().numpy(), fa2, qy,
           dt(steps.QIU_YAO_TOL), dt(limit))
    return s, m_blk


def _scores_pass(s, tile, scale: float, policy: Policy) -> None:
    """Scale, ``scores`` rounding and masks of a fresh score tile, in one compiled pass (none when
    there is nothing to do)."""
    from attnum.attention.fused_kernels import scores_

    dt = np.float32 if s.dtype == torch.float32 else np.float64
    sc = site_args(policy.scores, _carrier_fmt(policy))
    if scale != 1.0 or not sc[0] or tile.additive is not None or tile.keep is not None:
        add, use_add, keep, use_keep = _mask_arrays(tile, s.shape, dt)
        scores_(s.numpy(), dt(scale), scale != 1.0, sc, add, use_add, keep, use_keep)


def _round_site_(p, policy: Policy, site: str):
    """p rounded at ``site`` in place by the compiled pass (nothing when the carrier lies on its grid)."""
    from attnum.attention.fused_kernels import round_

    a = site_args(getattr(policy, site), _carrier_fmt(policy))
    if not a[0]:
        round_(p.view(-1).numpy(), a)
    return p


def fa2_step(q, k_j, v_j, tile, scale: float, m, l, acc, policy: Policy, ws, buf):
    """:func:`attnum.attention.flash_forward._fa2_step` (with the scores of the tile) in fused passes."""
    from attnum.attention.fused_kernels import acc_update_

    if policy.exp2 == "native" and policy.rescale_threshold is None:
        s, m_blk = _scores_shift(q, k_j, tile, scale, m, policy, True, buf)
        m_new = torch.maximum(m, m_blk)
        m_safe = steps.safe_max(m_new)
        p = _round_site_(s.exp_(), policy, "exp")
    else:
        m_new, m_safe, p = _fa4_exp(q, k_j, tile, scale, m, policy, buf)
    alpha = policy.round("rescale", torch.exp(m - m_safe))
    l = policy.round("row_sum", policy.round("row_sum", alpha * l) + policy.round("row_sum", p.sum(-1, keepdim=True)))
    if not policy.exp.fits_in(policy.probs):  # P as fed to the P V matmul (after its row sum is taken)
        _round_site_(p, policy, "probs")
    if steps.mma_accumulates(policy):  # O is the P V MMA's accumulator (steps.pv_onto)
        return m_new, l, steps.pv_onto(acc, alpha, p, v_j, policy, p_grid=policy.probs)
    if policy.acc_update == "once":  # O alpha + P V in fp32, rounded at acc once (steps.acc_once)
        return m_new, l, steps.acc_once(acc, alpha, p, v_j, policy, p_grid=policy.probs)
    pv = _pv(p, v_j, policy, ws)
    R, dv = acc.numel() // acc.shape[-1], acc.shape[-1]
    acc_update_(acc.view(R, dv).numpy(), alpha.reshape(R).contiguous().numpy(), pv.view(R, dv).numpy(),
                site_args(policy.acc, _carrier_fmt(policy)))
    return m_new, l, acc


def _pv(p, v_j, policy: Policy, ws):
    """P V_j (the policy's matmul), a native product written into a kept buffer (same bits, no fresh
    allocation per tile); contiguous."""
    shape = (*torch.broadcast_shapes(p.shape[:-2], v_j.shape[:-2]), p.shape[-2], v_j.shape[-1])
    return steps.matmul(p, v_j, policy, out=ws.get("pv", shape, p.dtype, p.device), sites=("probs", "inputs")).contiguous()


def _fa4_exp(q, k_j, tile, scale: float, m, policy: Policy, buf):
    """FlashAttention-4's steps of a tile (:mod:`attnum.attention.lowbit.fa4_steps`: the running maximum kept
    within ``rescale_threshold``, exp by the software exp2 polynomial), torch's ops around the compiled
    scores and rounding passes; returns (m_new, m_safe, P on the ``exp`` grid)."""
    from attnum.attention.fused_kernels import sub_rows_
    from attnum.attention.lowbit import fa4_steps

    s = steps.matmul(q, k_j.transpose(-1, -2), policy, out=buf).contiguous()
    _scores_pass(s, tile, scale, policy)
    m_new = torch.maximum(m, steps.block_max(s, policy))
    if policy.rescale_threshold is not None:
        m_new = fa4_steps.lazy_max(m, m_new, policy.rescale_threshold)
    m_safe = steps.safe_max(m_new)
    if policy.exp2 != "native":
        return m_new, m_safe, _round_site_(fa4_steps.exp_poly(s, m_safe, policy.exp2).to(s.dtype).contiguous(), policy,
                                           "exp")
    C = s.shape[-1]
    R = s.numel() // C
    sub_rows_(s.view(R, C).numpy(), m_safe.reshape(R).contiguous().numpy())
    return m_new, m_safe, _round_site_(s.exp_(), policy, "exp")


def fa1_step(q, k_j, v_j, tile, scale: float, m, l, o, policy: Policy, ws, buf):
    """:func:`attnum.attention.flash_forward._fa1_step` (with the scores of the tile) in fused passes."""
    from attnum.attention.fused_kernels import fa1_out_

    s, m_blk = _scores_shift(q, k_j, tile, scale, m, policy, False, buf)
    p = _round_site_(s.exp_(), policy, "exp")
    l_blk = policy.round("row_sum", p.sum(-1, keepdim=True))
    if not policy.exp.fits_in(policy.probs):
        _round_site_(p, policy, "probs")
    m_new = torch.maximum(m, m_blk)
    m_safe = steps.safe_max(m_new)
    alpha = policy.round("rescale", torch.exp(m - m_safe))
    beta = policy.round("rescale", torch.exp(m_blk - m_safe))
    l_new = policy.round("row_sum", policy.round("row_sum", alpha * l) + policy.round("row_sum", beta * l_blk))
    pv = _pv(p, v_j, policy, ws)
    R, dv = o.numel() // o.shape[-1], o.shape[-1]
    carrier = _carrier_fmt(policy)

    def rows(t):
        return t.reshape(R).contiguous().numpy()

    fa1_out_(o.view(R, dv).numpy(), rows(l * alpha), rows(beta), pv.view(R, dv).numpy(), rows(l_new),
             bool((l_new == 0).any()), site_args(policy.acc, carrier), site_args(policy.out, carrier))
    return m_new, l_new, o
