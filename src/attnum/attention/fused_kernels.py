"""The compiled passes of a fused flash tile step (numba); the steps that call them are :mod:`attnum.attention.fused`.

Shape alphabet: B batch, H heads, N queries, C keys in the tile (Bc), dv value dim, R = B*H*N rows.

Every operation is the one the unfused step does, in the same order and in the carrier's dtype (an
IEEE operation gives the same bits whichever program performs it); every rounding is
:func:`attnum.numerics.jit.round_scalar`, bit-for-bit :func:`attnum.round_to`. A site is passed as the tuple
``(identity, *jit.rne_args(fmt), *jit.rne32_args(fmt))`` (:func:`site_args`; Nones for the last seven
where the float32 kernel does not apply).
"""

from __future__ import annotations

import functools

import numpy as np

from attnum.numerics import jit

if jit.numba is not None:
    from numba import njit, types
    from numba.extending import overload

    from attnum.numerics.jit import _from_bits, _from_bits32, rne, rne32

    def as_carrier(v, like):
        """``v`` converted to the dtype of ``like`` (a carrier scalar): exact for values on a site's grid."""

    @overload(as_carrier)
    def _as_carrier(v, like):
        if like == types.float32:
            return lambda v, like: np.float32(v)
        return lambda v, like: np.float64(v)

    def row_max(bits):
        """The max of a carrier row given as its IEEE bits (int32 for float32, int64 for float64), as
        torch's amax: NaN when the row holds one, -inf when every element is -inf. Each element's bits
        map to an integer key in the floats' order (negatives' magnitude bits flipped), so the reduction
        is an integer max and min the compiler vectorizes (a float max with NaN checks does not: 7x
        slower). -0 ranks below +0 (a zero's sign never reaches an output: s - m and exp see it alike)."""

    # Per integer width of a carrier's bits: (int type, sign shift, magnitude mask, +inf's bits, a quiet NaN's bits).
    _WIDTH = {32: (np.int32, 31, 0x7FFFFFFF, 0x7F800000, 0x7FC00000),
              64: (np.int64, 63, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000, 0x7FF8000000000000)}

    def _width(bits):
        return _WIDTH[32 if bits.dtype == types.int32 else 64]

    def float_of_bits(i):
        """The carrier float whose IEEE bits are ``i`` (int32 -> float32, int64 -> float64)."""

    @overload(float_of_bits)
    def _float_of_bits(i):
        if i == types.int32:
            return lambda i: _from_bits32(i)
        return lambda i: _from_bits(i)

    @overload(row_max)
    def _row_max(bits):
        it, sh, mag, inf, nan = _width(bits)

        def impl(bits):
            shift, mask = it(sh), it(mag)
            kmax, kmin = it(-mag - 1), it(mag)
            for j in range(bits.size):
                k = bits[j]
                key = k ^ ((k >> shift) & mask)
                kmax = max(kmax, key)
                kmin = min(kmin, key)
            if kmax > it(inf) or kmin < it(-inf - 1):  # the keys of +inf and -inf
                return float_of_bits(it(nan))
            return float_of_bits(it(kmax ^ ((kmax >> shift) & mask)))  # it(): max() may widen to int64
        return impl

    def _rne_carrier(x, a):
        """x rounded at the site ``a`` (not the identity), in x's dtype: on float32's own bits for a
        float32 x (:func:`attnum.numerics.jit.rne32`; the same bits), else from float64."""

    @overload(_rne_carrier)
    def _rne_carrier_impl(x, a):
        if x == types.float32 and not isinstance(a.types[8], types.NoneType):  # chosen when compiled
            return lambda x, a: rne32(x, a[8], a[9], a[10], a[11], a[12], a[13], a[14])
        return lambda x, a: as_carrier(rne(np.float64(x), a[1], a[2], a[3], a[4], a[5], a[6], a[7]), x)

    @njit(inline="always", cache=True, error_model="numpy")
    def _rnd(x, a):
        """x (a carrier scalar) rounded at the site ``a``; the result in the carrier."""
        if a[0]:
            return x
        return _rne_carrier(x, a)

    @njit(cache=True, nogil=True, error_model="numpy")
    def scores_(s, scale, use_scale, sc, add, use_add, keep, use_keep):
        """In place on the score tile s (B, H, N, C) just out of the matmul: times ``scale``, rounded at
        ``scores`` (``sc``), plus the additive mask and rounded again, -inf where ``keep`` is False."""
        B, H, N, C = s.shape
        ninf = as_carrier(-np.inf, scale)
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

    @njit(cache=True, nogil=True, error_model="numpy")
    def shift_(s, bits, m_blk, m_old, fa2, qy, tol, limit):
        """Rows of s (R, C) minus their shift, in place; ``bits`` is s viewed as integers of its width.
        m_blk (R,) is written: the row max (:func:`row_max`), replaced by Qiu-Yao's shift when
        ``qy``; the shift is safe(max(m_old, m~)) (``fa2``) or safe(m~) (fa1). Each row is read for
        its max and shifted while it is in cache."""
        R, C = s.shape
        if R == 0:
            return
        zero = as_carrier(0.0, m_blk[0])
        nan = as_carrier(np.nan, m_blk[0])
        for r in range(R):
            row = s[r]
            mx = as_carrier(row_max(bits[r]), zero)
            m_blk[r] = mx
            if qy:
                near = 0
                for j in range(C):
                    near += mx - row[j] <= tol
                if near > 1 and abs(mx) <= limit:
                    mx = mx + mx if mx > 0 else zero  # 2 * mx in the carrier (a literal 2 would widen to float64)
                    m_blk[r] = mx
            mn = mx
            if fa2:
                mo = m_old[r]
                mn = nan if (mo != mo or mn != mn) else (mo if mo > mn else mn)
            mn = zero if mn == -np.inf else mn
            for j in range(C):
                row[j] = row[j] - mn

    @njit(cache=True, nogil=True, error_model="numpy")
    def sub_rows_(s, x):
        """s (R, C) <- s - x[r] per row, in place (the backward's S - LSE)."""
        R, C = s.shape
        for r in range(R):
            row, xr = s[r], x[r]
            for j in range(C):
                row[j] = row[j] - xr

    @njit(cache=True, nogil=True, error_model="numpy")
    def ds_(dp, p, D, sc, pr):
        """dS (R, C) <- round(P * (round(dP, scores) - D), probs) in place in dp; D (R,)."""
        R, C = dp.shape
        for r in range(R):
            dr, dpr, pr_ = D[r], dp[r], p[r]
            for j in range(C):
                dpr[j] = _rnd(pr_[j] * (_rnd(dpr[j], sc) - dr), pr)

    @njit(cache=True, nogil=True, error_model="numpy")
    def round_(p, site):
        """p (flat) rounded at ``site`` in place."""
        for i in range(p.size):
            p[i] = _rnd(p[i], site)

    @njit(cache=True, nogil=True, error_model="numpy")
    def acc_update_(acc, alpha, pv, ac):
        """acc (R, dv) <- round(round(acc * alpha, acc) + round(pv, acc), acc); alpha (R,)."""
        R, D = acc.shape
        for r in range(R):
            a, accr, pvr = alpha[r], acc[r], pv[r]
            for c in range(D):
                accr[c] = _rnd(_rnd(accr[c] * a, ac) + _rnd(pvr[c], ac), ac)

    @njit(cache=True, nogil=True, error_model="numpy")
    def fa1_out_(o, la, beta, pv, l_new, any_empty, ac, out):
        """FA1's O (R, dv) <- round(zero_empty((round(la * O, acc) + round(beta * round(pv, acc), acc)) / l_new), out)."""
        R, D = o.shape
        if R == 0:
            return
        zero = as_carrier(0.0, l_new[0])
        for r in range(R):
            zero_row = any_empty and l_new[r] == 0
            lar, br, lr, orow, pvr = la[r], beta[r], l_new[r], o[r], pv[r]
            for c in range(D):
                x = (_rnd(lar * orow[c], ac) + _rnd(br * _rnd(pvr[c], ac), ac)) / lr
                orow[c] = zero if zero_row else _rnd(x, out)

    def abs_range(bits):
        """(max |x|, min nonzero |x|) of a flat carrier array given as its IEEE bits (int32 for float32,
        int64 for float64), as torch's max and min: both NaN when x holds a NaN; min is inf when every
        element is 0. Integer max/min of the magnitude bits (they sort as the magnitudes do), vectorized."""

    @overload(abs_range)
    def _abs_range(bits):
        it, _, mag, inf, _ = _width(bits)

        def impl(bits):
            mask, infb = it(mag), it(inf)
            hi, lo = it(0), infb
            for i in range(bits.size):
                a = bits[i] & mask
                hi = max(hi, a)
                lo = min(lo, a if a != 0 else infb)
            if hi > infb:
                return np.nan, np.nan
            return np.float64(float_of_bits(it(hi))), np.float64(float_of_bits(it(lo)))
        return impl

    @njit(cache=True, nogil=True, error_model="numpy")
    def abs_range_bits(bits):
        """:func:`abs_range` compiled for a call from Python."""
        return abs_range(bits)


@functools.lru_cache(maxsize=256)
def site_args(fmt, carrier_fmt) -> tuple:
    """A site's format as the kernels' tuple: ``identity`` (every carrier value lies on its grid), then
    :func:`attnum.numerics.jit.rne_args`, then :func:`attnum.numerics.jit.rne32_args` when the float32 kernel applies to a
    float32 carrier, else seven Nones (the kernels then round a float32 from float64; the choice is made
    when a kernel is compiled, from the tuple's type, so no branch runs per element)."""
    identity = bool(carrier_fmt.fits_in(fmt))
    use32 = not identity and carrier_fmt.mbits == 23 and jit.rne32_applies(fmt, np.float32, np.float32)
    return (identity, *jit.rne_args(fmt), *(jit.rne32_args(fmt) if use32 else (None,) * 7))
