"""The compiled passes of a fused flash tile step (numba); the steps that call them are :mod:`attnum.attention.fused`.

Shape alphabet: B batch, H heads, N queries, C keys in the tile (Bc), dv value dim, R = B*H*N rows.

Every operation is the one the unfused step does, in the same order and in the carrier's dtype (an
IEEE operation gives the same bits whichever program performs it); every rounding is
:func:`attnum.jit.round_scalar`, bit-for-bit :func:`attnum.round_to`. A site is passed as the tuple
``(identity, *jit.rne_args(fmt))`` (:func:`site_args`).
"""

from __future__ import annotations

import numpy as np

from attnum import jit

if jit.numba is not None:
    from numba import njit, types
    from numba.extending import overload

    from attnum.jit import rne

    def as_carrier(v, like):
        """``v`` converted to the dtype of ``like`` (a carrier scalar): exact for values on a site's grid."""

    @overload(as_carrier)
    def _as_carrier(v, like):
        if like == types.float32:
            return lambda v, like: np.float32(v)
        return lambda v, like: np.float64(v)

    @njit(inline="always", cache=True, error_model="numpy")
    def _rnd(x, a):
        """x (a carrier scalar) rounded at the site ``a``; the result in the carrier."""
        if a[0]:
            return x
        return as_carrier(rne(np.float64(x), a[1], a[2], a[3], a[4], a[5], a[6], a[7]), x)

    @njit(cache=True, error_model="numpy")
    def scores_shift_(s, scale, use_scale, sc, add, use_add, keep, use_keep, m_old, fa2, qy, tol, limit, m_blk):
        """In place on the score tile s (B, H, N, C) just out of the matmul: times ``scale``, rounded
        at ``scores`` (``sc``), plus the additive mask and rounded again, -inf where ``keep`` is False;
        then each row's shift m~ (amax, NaN-propagating; Qiu-Yao's when ``qy``) into m_blk (B, H, N),
        and s - safe(max(m_old, m~)) (``fa2``) or s - safe(m~) (fa1) written back."""
        B, H, N, C = s.shape
        ninf = as_carrier(-np.inf, scale)
        zero = as_carrier(0.0, scale)
        nan = as_carrier(np.nan, scale)
        for b in range(B):
            for h in range(H):
                for n in range(N):
                    row = s[b, h, n]
                    for j in range(C):
                        v = row[j]
                        if use_scale:
                            v = v * scale
                        v = _rnd(v, sc)
                        if use_add:
                            v = _rnd(v + add[b, h, n, j], sc)
                        if use_keep and not keep[b, h, n, j]:
                            v = ninf
                        row[j] = v
                    mx = ninf
                    has_nan = False
                    for j in range(C):
                        v = row[j]
                        has_nan |= v != v
                        mx = v if v > mx else mx
                    if has_nan:
                        mx = nan
                    if qy:
                        near = 0
                        for j in range(C):
                            near += mx - row[j] <= tol
                        if near > 1 and abs(mx) <= limit:
                            mx = mx * 2 if mx > 0 else zero
                    m_blk[b, h, n] = mx
                    mn = mx
                    if fa2:
                        mo = m_old[b, h, n]
                        if mo != mo or mn != mn:
                            mn = nan
                        elif mo > mn:
                            mn = mo
                    if mn == ninf:
                        mn = zero
                    for j in range(C):
                        row[j] = row[j] - mn

    @njit(cache=True, error_model="numpy")
    def scores_sub_(s, scale, use_scale, sc, add, use_add, keep, use_keep, lse):
        """The backward's recomputed tile: s (B, H, N, C) scaled, rounded at ``scores``, masked as in
        :func:`scores_shift_`, minus the row's (safe) LSE (B, H, N), in place."""
        B, H, N, C = s.shape
        ninf = as_carrier(-np.inf, scale)
        for b in range(B):
            for h in range(H):
                for n in range(N):
                    row = s[b, h, n]
                    m = lse[b, h, n]
                    for j in range(C):
                        v = row[j]
                        if use_scale:
                            v = v * scale
                        v = _rnd(v, sc)
                        if use_add:
                            v = _rnd(v + add[b, h, n, j], sc)
                        if use_keep and not keep[b, h, n, j]:
                            v = ninf
                        row[j] = v - m

    @njit(cache=True, error_model="numpy")
    def ds_(dp, p, D, sc, pr):
        """dS (R, C) <- round(P * (round(dP, scores) - D), probs) in place in dp; D (R,)."""
        R, C = dp.shape
        for r in range(R):
            dr = D[r]
            for j in range(C):
                dp[r, j] = _rnd(p[r, j] * (_rnd(dp[r, j], sc) - dr), pr)

    @njit(cache=True, error_model="numpy")
    def round_copy_(p, ex, pr, use_pr, p_probs):
        """p (flat) rounded at ``exp`` in place; with ``use_pr`` also rounded at ``probs`` into p_probs."""
        if not ex[0]:
            for i in range(p.size):
                p[i] = _rnd(p[i], ex)
        if use_pr:
            for i in range(p.size):
                p_probs[i] = _rnd(p[i], pr)

    @njit(cache=True, error_model="numpy")
    def acc_update_(acc, alpha, pv, ac):
        """acc (R, dv) <- round(round(acc * alpha, acc) + round(pv, acc), acc); alpha (R,)."""
        R, D = acc.shape
        for r in range(R):
            a = alpha[r]
            for c in range(D):
                acc[r, c] = _rnd(_rnd(acc[r, c] * a, ac) + _rnd(pv[r, c], ac), ac)

    @njit(cache=True, error_model="numpy")
    def fa1_out_(o, la, beta, pv, l_new, any_empty, ac, out):
        """FA1's O (R, dv) <- round(zero_empty((round(la * O, acc) + round(beta * round(pv, acc), acc)) / l_new), out)."""
        R, D = o.shape
        for r in range(R):
            zero_row = any_empty and l_new[r] == 0
            for c in range(D):
                x = (_rnd(la[r] * o[r, c], ac) + _rnd(beta[r] * _rnd(pv[r, c], ac), ac)) / l_new[r]
                o[r, c] = 0.0 if zero_row else _rnd(x, out)


def site_args(fmt, carrier_fmt) -> tuple:
    """A site's format as the kernels' tuple; ``identity`` when every carrier value lies on its grid."""
    return (bool(carrier_fmt.fits_in(fmt)), *jit.rne_args(fmt))
