"""Tiny Triton kernels for :mod:`attnum.kernels.triton_selftest` (imported only with TRITON_INTERPRET=1)."""

import triton
import triton.language as tl


@triton.jit
def mul_sum(q_ptr, k_ptr, prod_ptr, sum_ptr, N: tl.constexpr):
    """prod = q * k (bf16 x bf16 -> bf16, stored bf16); sum = tl.sum(q * k) (bf16, stored fp32)."""
    i = tl.arange(0, N)
    p = tl.load(q_ptr + i) * tl.load(k_ptr + i)
    tl.store(prod_ptr + i, p)
    tl.store(sum_ptr, tl.sum(p, axis=0).to(tl.float32))


@triton.jit
def store_cast(x_ptr, y_ptr, N: tl.constexpr):
    """y (bf16) = x (fp32): the store converts."""
    i = tl.arange(0, N)
    tl.store(y_ptr + i, tl.load(x_ptr + i))


@triton.jit
def dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr, PRECISION: tl.constexpr):
    """c (fp32) = tl.dot(a, b, input_precision=PRECISION) + 1 (a (M, K), b (K, N) row-major)."""
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    acc = tl.full((M, N), 1.0, tl.float32)
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b, acc, input_precision=PRECISION))


@triton.jit
def dot_lowp(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    """c (fp32) = tl.dot(a, b) for bf16 / fp16 / fp8 operands, fp32 accumulator."""
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b, out_dtype=tl.float32))


@triton.jit
def exp(x_ptr, y_ptr, N: tl.constexpr):
    """y = tl.exp(x) (fp32)."""
    i = tl.arange(0, N)
    tl.store(y_ptr + i, tl.exp(tl.load(x_ptr + i)))


@triton.jit
def max_bf16(x_ptr, y_ptr, N: tl.constexpr):
    """y = tl.max(x) of bf16 values (negative ones included)."""
    i = tl.arange(0, N)
    tl.store(y_ptr, tl.max(tl.load(x_ptr + i), axis=0))
