"""Compiled MMA arithmetic (numba): every output element's chain of groups, in one pass, integer sums.

The plain torch reference is :func:`attnum.numerics.mma.dense.matmul_reference`; these kernels compute the same
bits. Inputs are float64 values (exact: an operand, a product of two operands and an fp32/fp16 accumulator
are all normal float64 numbers, 2**-266 <= |x| < 2**256) and each operand's exponent as the adder sees it
(its binade, floored at the format's smallest normal binade; ZERO_EXP for a zero). A group's aligned,
truncated terms are integers of at most F + 2 bits, so their sum is exact in float64 and int64 alike
(|sum| < (L + 1) * 2**(F + 2) < 2**36).
"""

from __future__ import annotations

import numpy as np

from attnum.numerics import jit

ZERO_EXP = -20000  # a zero operand's exponent: its products sit below every e_zero (and int32 holds the sum)

if jit.numba is not None:
    from numba import njit

    _bits, _from_bits, _pow2 = jit._bits, jit._from_bits, jit._pow2

    @njit(inline="always", cache=True, error_model="numpy")
    def _binade(x):
        """floor(log2(x)) of a normal positive float64."""
        return ((_bits(x) >> 52) & 0x7FF) - 1023

    @njit(inline="always", cache=True, error_model="numpy")
    def _finite(x):
        return x - x == 0.0

    @njit(inline="always", cache=True, error_model="numpy")
    def _acc_exp(x, e_zero, c_emin):
        """The accumulator's exponent in a group's alignment: its binade floored at ``c_emin``; ``e_zero``
        for a zero (and for an inf or NaN, whose exponent never changes a result)."""
        return e_zero if x == 0.0 or not _finite(x) else max(_binade(abs(x)), c_emin)

    @njit(inline="always", cache=True, error_model="numpy")
    def _round_out(acc, x0, mbits, emin, rne, overflow):
        """acc * 2**x0 rounded to mbits fraction bits above the exponent floor emin (toward zero, or to
        nearest even when ``rne``); at or past ``overflow`` (2**(emax + 1)) it is inf. Zero is +0."""
        if acc == 0:
            return 0.0
        m = -acc if acc < 0 else acc
        E = _binade(np.float64(m)) + x0
        q = max(E, emin) - mbits
        sh = q - x0
        if sh <= 0:
            v = np.float64(m) * _pow2(x0)
        elif sh > 62:  # m < 2**37: everything is dropped, and less than half a quantum
            return 0.0
        else:
            n = m >> sh
            if rne:
                rem = m - (n << sh)
                half = np.int64(1) << (sh - 1)
                if rem > half or (rem == half and (n & 1) == 1):
                    n += 1
            if n == 0:
                return 0.0
            v = np.float64(n) * _pow2(q)
        if v >= overflow:
            v = np.inf
        return -v if acc < 0 else v

    @njit(inline="always", cache=True, error_model="numpy")
    def _pow2n(q):
        """2**q for q clamped to float64's normal exponents, branch-free (it vectorizes). The kernels' scales
        2**(F - e_max) and 2**(e_max - F) lie there for every finite group; an inf or NaN term (e_max past
        1023) only needs a scale that keeps it inf or NaN and the finite terms below one unit."""
        return _from_bits(np.int64(min(max(q, -1022), 1023) + 1023) << 52)

    @njit(inline="always", cache=True, error_model="numpy")
    def _rz_out(acc, x0, mbits, emin, overflow):
        """:func:`_round_out` toward zero, straight-line (it vectorizes): acc (a float64 integer below
        2**37) times 2**x0 is exact in float64, then its significand is cut to mbits fraction bits (a
        mask of the IEEE bits) or, below 2**emin, to the quantum 2**(emin - mbits). Zero is +0."""
        v = acc * _pow2n(x0)
        cut = _from_bits(_bits(v) & ~((np.int64(1) << (52 - mbits)) - 1))
        q = _pow2(emin - mbits)
        r = cut if abs(v) >= _pow2(emin) else np.trunc(v / q) * q
        r = r + 0.0  # -0 -> +0
        return np.copysign(np.inf, r) if abs(r) >= overflow else r

    @njit(cache=True, nogil=True, error_model="numpy")
    def exponents(v, emin, out):
        """Each operand's exponent as the adder sees it (flat float64 ``v`` -> int32 ``out``): its binade
        floored at ``emin``, ZERO_EXP for a zero, and for an inf or NaN max(-1, emin) (frexp's exponent, as
        the reference reads it; a non-finite product's exponent never changes a result)."""
        for n in range(v.size):
            x = v[n]
            if x == 0.0:
                out[n] = ZERO_EXP
            elif _finite(x):
                out[n] = max(_binade(abs(x)), emin)
            else:
                out[n] = max(-1, emin)

    @njit(cache=True, nogil=True, error_model="numpy")
    def nv_mma(av, ea, bv, eb, c, out, L, F, e_zero, c_emin, mbits, emin, rne, overflow):
        """NVIDIA's truncated fused dot product (MMA-Sim's T-FDPA), chained over K in groups of L.

        av, ea: (B, M, K) operand values and exponents; bv, eb: (B, K, N); c, out: (B, M, N) float64 (out
        holds fp32 / e8m13 / fp16 values). A zero operand's exponent is ZERO_EXP (far below e_zero), so a
        zero product never sets the maximum; e_zero enters through the accumulator instead (a zero c counts
        as e_zero, a nonzero one is at least c_emin > e_zero), which is the same maximum.

        Per (batch, row) the loops run over a whole row of N outputs at a time (the inner loop over j is
        straight-line arithmetic that vectorizes): the group's largest exponent, the scale 2**(F - e_max),
        the truncated terms summed in float64 (integers below 2**36: exact in any order), then one
        rounding per output (:func:`_round_out`). An inf or NaN operand or accumulator passes through the
        same arithmetic as IEEE specials (trunc(inf) = inf, inf - inf = NaN), as in MMA-Sim."""
        nb, M, K = av.shape
        N = bv.shape[2]
        emax = np.empty(N, np.int32)
        scale = np.empty(N, np.float64)
        acc = np.empty(N, np.float64)
        r = np.empty(N, np.float64)
        for ib in range(nb):
            for i in range(M):
                r[:] = c[ib, i, :]
                for k0 in range(0, K, L):
                    for j in range(N):
                        emax[j] = _acc_exp(r[j], e_zero, c_emin)
                    for k in range(k0, k0 + L):
                        ek, erow = ea[ib, i, k], eb[ib, k]
                        for j in range(N):
                            emax[j] = max(emax[j], ek + erow[j])
                    for j in range(N):
                        scale[j] = _pow2n(F - emax[j])
                        acc[j] = np.trunc(r[j] * scale[j])
                    for k in range(k0, k0 + L):
                        ak, brow = av[ib, i, k], bv[ib, k]
                        for j in range(N):
                            acc[j] += np.trunc(ak * brow[j] * scale[j])
                    if rne:
                        for j in range(N):
                            x = acc[j]
                            if _finite(x):
                                r[j] = _round_out(np.int64(x), emax[j] - F, mbits, emin, rne, overflow)
                            else:
                                r[j] = x
                    else:
                        for j in range(N):
                            x = acc[j]
                            r[j] = _rz_out(x, emax[j] - F, mbits, emin, overflow) if _finite(x) else x
                out[ib, i, :] = r

    @njit(inline="always", cache=True, error_model="numpy")
    def _floor_shift(x, s):
        """floor(x / 2**s) of an int64 for s >= 0."""
        if s > 62:
            return np.int64(-1) if x < 0 else np.int64(0)
        return x >> s

    @njit(cache=True, nogil=True, error_model="numpy")
    def cdna3_mma(av, ea, bv, eb, c, out, L, F, F2, split):
        """CDNA3's two-stage dot product (MMA-Sim's TR-FDPA; GTR-FDPA when ``split``), chained over K.

        Per group: the L products truncated to F bits below their largest exponent and summed (``split``:
        the even and odd k separately, then both rounded down to the larger exponent's F-bit grid); that
        sum and the fp32 accumulator aligned to the larger exponent, rounding DOWN (floor) to F2 + 1 and F
        bits (``split``: an accumulator more than F + 1 binades below is dropped, even an inf or NaN one,
        whose exponent the model takes as -1); their sum rounded down to F2 fraction bits, then to nearest
        fp32. A product of 2**128 or more is inf (it overflows before the adder)."""
        nb, M, K = av.shape
        N = bv.shape[2]
        big = 2.0**128
        for ib in range(nb):
            for i in range(M):
                for j in range(N):
                    r = c[ib, i, j]
                    for k0 in range(0, K, L):
                        pspec = 0.0
                        em0 = em1 = -999
                        for k in range(k0, k0 + L):
                            p = av[ib, i, k] * bv[ib, k, j]
                            if not _finite(p):
                                pspec += p
                            elif abs(p) >= big:
                                pspec += np.inf if p > 0 else -np.inf
                            elif p != 0.0:
                                e = ea[ib, i, k] + eb[ib, k, j]
                                if split and (k - k0) & 1:
                                    em1 = max(em1, e)
                                else:
                                    em0 = max(em0, e)
                        if not _finite(r):
                            ec = -1
                        elif r == 0.0:
                            ec = -126
                        else:
                            ec = max(_binade(abs(r)), -126)
                        edot = max(em0, em1)
                        em = max(edot, ec)
                        dropped = split and ec < em - F - 1
                        spec = pspec if dropped or _finite(r) else pspec + r
                        if spec != 0.0:
                            r = spec
                            continue
                        s0 = _pow2(F - em0) if em0 > -999 else 0.0
                        s1 = _pow2(F - em1) if em1 > -999 else 0.0
                        acc0 = np.int64(0)
                        acc1 = np.int64(0)
                        for k in range(k0, k0 + L):
                            p = av[ib, i, k] * bv[ib, k, j]
                            if split and (k - k0) & 1:
                                acc1 += np.int64(p * s1)
                            else:
                                acc0 += np.int64(p * s0)
                        d = _floor_shift(acc0, edot - em0) + _floor_shift(acc1, edot - em1)  # units 2**(edot-F)
                        sh = edot - em + (F2 + 1 - F)  # the dot sum in units of 2**(em - F2 - 1)
                        d = d << sh if sh >= 0 else _floor_shift(d, -sh)
                        cu = np.int64(0) if dropped else np.int64(np.floor(r * _pow2(F - em)))
                        S = d + (cu << (F2 + 1 - F))
                        x0 = em - F2 - 1
                        if S == 0:
                            r = 0.0
                            continue
                        E = _binade(np.float64(abs(S))) + x0
                        q = max(E, -126) - F2
                        sh2 = q - x0
                        if sh2 > 0:
                            v = np.float64(S >> sh2) * _pow2(q)
                        else:
                            v = np.float64(S) * _pow2(x0)
                        r = np.float64(np.float32(v))  # one IEEE rounding to nearest fp32 (inf past max)
                    out[ib, i, j] = r
