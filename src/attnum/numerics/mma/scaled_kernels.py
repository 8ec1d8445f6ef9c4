"""Compiled arithmetic of the group-scaled block MMA (numba): MMA-Sim's GST-FDPA, chained over K.

The plain torch reference is :func:`attnum.numerics.mma.scaled.matmul_block_scaled_reference`; this kernel
computes the same bits. The ST-FDPA instructions (``kind::mxf8f6f4``) need no kernel of their own: with the
power-of-two scales folded into the operands they are :func:`attnum.numerics.mma.dense_kernels.nv_mma`.

Inputs are exact float64 values: the e2m1 elements (a sum of G products of them is a multiple of 1/4 below
2**10, exact in any order), the block scales and their exponents as the adder sees them (the binade floored
at the scale format's smallest normal binade). A term P * sa * sb has at most 20 significant bits,
so every aligned, truncated term is an integer below 2**(F + 12) and a group's sum is exact in float64.
"""

from __future__ import annotations

import numpy as np

from attnum.numerics import jit

if jit.numba is not None:
    from numba import njit

    from attnum.numerics.mma.dense_kernels import _acc_exp, _finite, _pow2n, _rz_out

    @njit(cache=True, nogil=True, error_model="numpy")
    def gst_mma(av, bv, sa, ea, sb, eb, c, out, G, per_inst, per_block, F, e_zero, c_emin, mbits, emin, overflow):
        """The group-scaled truncated fused dot product (MMA-Sim's GST-FDPA), chained over the instructions.

        av: (B, M, K) and bv: (B, K, N) e2m1 values; sa, ea: (B, M, K // block) A's block scales (values)
        and their exponents; sb, eb: (B, K // block, N) B's; c, out: (B, M, N) float64 (out holds fp32
        values). A group is G consecutive k, ``per_inst`` groups one instruction, ``per_block`` groups
        share a scale. Per instruction and output: each group's exact sum P of G products and whether any
        product is nonzero; its term P * sa * sb with exponent ea + eb (``e_zero`` when its products are
        all zero or its scale is zero; a sum that cancels to zero keeps the scales' exponent); the
        accumulator with its binade (``e_zero`` if zero); all aligned to the largest exponent, truncated
        to F fraction bits, summed, rounded toward zero to fp32 (inf at or past ``overflow``), -0 to +0.
        A NaN scale or an inf / NaN accumulator passes through as IEEE arithmetic (NaN, inf, inf - inf =
        NaN), as in MMA-Sim. The loops over j (a row of N outputs) are straight-line and vectorize."""
        nb, M, K = av.shape
        N = bv.shape[2]
        emax = np.empty(N, np.int32)
        scale = np.empty(N, np.float64)
        acc = np.empty(N, np.float64)
        r = np.empty(N, np.float64)
        P = np.empty((per_inst, N), np.float64)
        nz = np.empty((per_inst, N), np.bool_)
        for ib in range(nb):
            for i in range(M):
                r[:] = c[ib, i, :]
                for g0 in range(0, K // G, per_inst):
                    for q in range(per_inst):
                        P[q, :] = 0.0
                        nz[q, :] = False
                        for k in range((g0 + q) * G, (g0 + q + 1) * G):
                            ak = av[ib, i, k]
                            if ak != 0.0:  # e2m1 has no inf or NaN: a zero element adds nothing
                                brow = bv[ib, k]
                                for j in range(N):
                                    P[q, j] += ak * brow[j]  # multiples of 1/4 below 2**10: exact
                                    nz[q, j] |= brow[j] != 0.0
                    for j in range(N):
                        emax[j] = _acc_exp(r[j], e_zero, c_emin)
                    for q in range(per_inst):
                        blk = (g0 + q) // per_block
                        s_i, e_i = sa[ib, i, blk], ea[ib, i, blk]
                        srow, erow = sb[ib, blk], eb[ib, blk]
                        for j in range(N):
                            e = e_i + erow[j]
                            if not nz[q, j] or s_i * srow[j] == 0.0:
                                e = e_zero
                            emax[j] = max(emax[j], e)
                    for j in range(N):
                        scale[j] = _pow2n(F - emax[j])
                        acc[j] = np.trunc(r[j] * scale[j])
                    for q in range(per_inst):
                        blk = (g0 + q) // per_block
                        s_i = sa[ib, i, blk]
                        srow = sb[ib, blk]
                        for j in range(N):
                            acc[j] += np.trunc(P[q, j] * s_i * srow[j] * scale[j])
                    for j in range(N):
                        x = acc[j]
                        r[j] = _rz_out(x, emax[j] - F, mbits, emin, overflow) if _finite(x) else x
                out[ib, i, :] = r
