"""Tiny Triton kernels for :mod:`attnum.kernels.triton.selftest` (imported only with TRITON_INTERPRET=1)."""

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
def dot_fp8_imprecise(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr, MAX: tl.constexpr):
    """c (fp32) = tl.dot(a, b, max_num_imprecise_acc=MAX) of fp8 operands (MAX = 0: the target's default)."""
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    if MAX == 0:
        d = tl.dot(a, b, out_dtype=tl.float32)
    else:
        d = tl.dot(a, b, out_dtype=tl.float32, max_num_imprecise_acc=MAX)
    tl.store(c_ptr + m[:, None] * N + n[None, :], d)


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


@triton.jit
def dot_int8(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    """c (int32) = tl.dot(a, b) of int8 operands (SageAttention's Q K^T)."""
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b))


@triton.jit
def dot_fp16_acc(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    """c (fp16) = tl.dot(a, b, out_dtype=fp16) of fp16 operands: an fp16 accumulator (SageAttention's P V)."""
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b, out_dtype=tl.float16))


@triton.jit
def to_int8(x_ptr, y_ptr, N: tl.constexpr):
    """y (int8) = x (fp32) rounded half away from zero as SageAttention's quantizer does it."""
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    x += 0.5 * tl.where(x >= 0, 1, -1)
    tl.store(y_ptr + i, x.to(tl.int8))


@triton.jit
def mul_add(a_ptr, b_ptr, c_ptr, y_ptr, z_ptr, w_ptr, N: tl.constexpr):
    """fp32: y = a * b + c and z = c - a * b (one product, two uses), w = a * b (stored alone)."""
    i = tl.arange(0, N)
    a, b, c = tl.load(a_ptr + i), tl.load(b_ptr + i), tl.load(c_ptr + i)
    p = a * b
    tl.store(y_ptr + i, p + c)
    tl.store(z_ptr + i, c - p)
    tl.store(w_ptr + i, p)


@triton.jit
def scaled_acc_dot(a_ptr, b_ptr, c_ptr, s_ptr, y_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    """y (fp32) = c * s[:, None] + tl.dot(a, b): fp16 a, b; the online-softmax rescale then P V."""
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    acc = tl.load(c_ptr + m[:, None] * N + n[None, :]) * tl.load(s_ptr + m)[:, None]
    acc += tl.dot(a, b)
    tl.store(y_ptr + m[:, None] * N + n[None, :], acc)
