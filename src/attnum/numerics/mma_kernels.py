"""Compiled MMA arithmetic (numba): every output element's chain of groups, in one pass, integer sums.

The plain torch reference is :func:`attnum.numerics.mma.matmul_reference`; these kernels compute the same
bits. Inputs are float64 values (exact: an operand, a product of two operands and an fp32/fp16 accumulator
are all normal float64 numbers, 2**-266 <= |x| < 2**256) and each operand's exponent as the adder sees it
(its binade, floored at the format's smallest normal binade). A group's aligned, truncated terms are
integers of at most F + 2 bits, so their sum is an exact int64 (|sum| < (L + 1) * 2**(F + 2) < 2**36).
"""

from __future__ import annotations

import numpy as np

from . import jit

if jit.numba is not None:
    from numba import njit

    _bits, _pow2 = jit._bits, jit._pow2

    @njit(inline="always", cache=True, error_model="numpy")
    def _binade(x):
        """floor(log2(x)) of a normal positive float64."""
        return ((_bits(x) >> 52) & 0x7FF) - 1023

    @njit(inline="always", cache=True, error_model="numpy")
    def _finite(x):
        return x - x == 0.0

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

    @njit(cache=True, nogil=True, error_model="numpy")
    def nv_mma(av, ea, bv, eb, c, out, L, F, e_zero, c_emin, mbits, emin, rne, overflow):
        """NVIDIA's truncated fused dot product (MMA-Sim's T-FDPA), chained over K in groups of L.

        av, ea: (B, M, K) operand values and exponents; bv, eb: (B, N, K) (b transposed); c, out:
        (B, M, N) float64 (out holds fp32 / e8m13 / fp16 values). Per group: the largest exponent among
        the L products (a zero counts as e_zero) and the accumulator (its binade floored at c_emin);
        every term truncated to F fraction bits below it; the integer sum rounded (:func:`_round_out`)
        and carried to the next group. Any inf or NaN term makes the group's IEEE sum of specials."""
        nb, M, K = av.shape
        N = bv.shape[1]
        for ib in range(nb):
            for i in range(M):
                for j in range(N):
                    r = c[ib, i, j]
                    for k0 in range(0, K, L):
                        spec = 0.0
                        if not _finite(r):
                            spec = r
                            emax = e_zero
                        elif r == 0.0:
                            emax = e_zero
                        else:
                            emax = max(_binade(abs(r)), c_emin)
                        for k in range(k0, k0 + L):
                            p = av[ib, i, k] * bv[ib, j, k]
                            e = e_zero if p == 0.0 else ea[ib, i, k] + eb[ib, j, k]
                            emax = max(emax, e)
                            if not _finite(p):
                                spec += p
                        if spec != 0.0:  # inf or NaN: inf + -inf is NaN, as the adder's sum
                            r = spec
                            continue
                        scale = _pow2(F - emax)
                        acc = np.int64(r * scale)  # float -> int64 truncates toward zero
                        for k in range(k0, k0 + L):
                            acc += np.int64(av[ib, i, k] * bv[ib, j, k] * scale)
                        r = _round_out(acc, emax - F, mbits, emin, rne, overflow)
                    out[ib, i, j] = r

    @njit(cache=True, nogil=True, error_model="numpy")
    def cdna3_mma(av, ea, bv, eb, c, out, L, F, F2):
        """CDNA3's two-stage dot product (MMA-Sim's TR-FDPA), chained over K in groups of L.

        Per group: the L products truncated to F bits below their largest exponent and summed; that sum
        and the fp32 accumulator aligned to the larger exponent, rounding DOWN (floor) to F2 + 1 and F
        bits; their sum rounded down to F2 fraction bits, then to nearest fp32. A product of 2**128 or
        more is inf (it overflows before the adder)."""
        nb, M, K = av.shape
        N = bv.shape[1]
        big = 2.0**128
        for ib in range(nb):
            for i in range(M):
                for j in range(N):
                    r = c[ib, i, j]
                    for k0 in range(0, K, L):
                        spec = 0.0 if _finite(r) else r
                        edot = -999
                        for k in range(k0, k0 + L):
                            p = av[ib, i, k] * bv[ib, j, k]
                            if p != 0.0:
                                edot = max(edot, ea[ib, i, k] + eb[ib, j, k])
                            if not _finite(p):
                                spec += p
                            elif abs(p) >= big:
                                spec += np.inf if p > 0 else -np.inf
                        if spec != 0.0:
                            r = spec
                            continue
                        scale = _pow2(F - edot) if edot > -999 else 0.0
                        acc = np.int64(0)
                        for k in range(k0, k0 + L):
                            acc += np.int64(av[ib, i, k] * bv[ib, j, k] * scale)
                        ec = -126 if r == 0.0 else max(_binade(abs(r)), -126)
                        em = max(edot, ec)
                        sh = edot - em + (F2 + 1 - F)  # the dot sum in units of 2**(em - F2 - 1)
                        if sh >= 0:
                            d = acc << sh
                        elif sh < -62:
                            d = np.int64(-1) if acc < 0 else np.int64(0)
                        else:
                            d = acc >> (-sh)  # arithmetic shift: floor
                        cu = np.int64(np.floor(r * _pow2(F - em)))
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
