"""The arithmetic of a Triton kernel on an NVIDIA GPU (sm80 / sm90), as plain torch functions.

These are the model :mod:`attnum.kernels.triton.faithful` plugs into Triton's interpreter, and the
reference its self-test compares the interpreter against. Every rounding is :func:`attnum.numerics.rounding.round_to`.
Values travel as float32 / float64 tensors; ``fmt`` is a name from :mod:`attnum.numerics.formats`.

What the GPU does, and where it is written down (Triton 3.x, ``third_party/nvidia`` backend):

- **element-wise bf16 / fp16.** The frontend keeps ``bf16 op bf16`` in bf16 and ``fp16 op fp16`` in fp16
  (``semantic.py``, ``computation_type_impl``; ``/`` and ``%`` go to fp32). The backend computes
  ``add/sub/mul`` natively on sm90 (``add.rn.bf16``) and on sm80 extends to fp32, computes, and truncates
  back with ``cvt.rn.bf16.f32`` (``ElementwiseOpToLLVM.cpp``, ``EmitDualBF16ElementwiseOp``). Both are
  one correctly rounded result: fp32 keeps 24 bits >= 2 p + 2 for bf16 (p = 8) and fp16 (p = 11), so
  rounding first to fp32 and then to the format is innocuous (Figueroa, "When is double rounding
  innocuous?", SIGNUM 1995). Model: :func:`elementwise` (compute in fp32, round once).
- **casts** round to nearest even unless the kernel asks otherwise (``tl.cast(..., fp_downcast_rounding=
  "rtz")``); fp32 -> fp8 uses ``cvt.rn.satfinite.e4m3x2.f32`` / ``...e5m2x2``: saturating. :func:`cast`.
- **tl.dot** with fp32 operands follows ``input_precision`` (NVIDIA's default ``"tf32"``):
  ``tf32`` feeds the fp32 registers to ``mma.sync`` / ``wgmma`` ``.tf32``, which read the top 19 bits
  (the low 13 mantissa bits are ignored: truncation, no conversion instruction is emitted);
  ``tf32x3`` splits each operand as big = ``cvt.rna.tf32.f32`` (round to nearest, ties *away* from zero:
  PTX ISA, "cvt", rounding modifier ``.rna``), small = x - big, and sums three tf32 dots
  (``F32DotTC.cpp``: small x big + big x small, NaN-masked, then big x big); ``ieee`` is exact fp32.
  bf16 / fp16 / fp8 operands are exact. Each tensor-core instruction rounds as
  :func:`attnum.numerics.mma.dense.matmul` says for the architecture (alignment to the largest exponent of a
  group, truncation, round toward zero into fp32; FP8 on sm89 and on sm90's wgmma keeps 13 fraction
  bits): :func:`dot` with ``arch``. Which instruction (:func:`instruction`): ``mma.sync`` on sm80 / sm89,
  ``wgmma`` on sm90 when Triton's ``AccelerateMatmul`` picks MMAv3 (2-D, M % 64 == 0, N % 8 == 0,
  num_warps % 4 == 0, and for fp8 ``max_num_imprecise_acc >= 32``), else ``mma.sync``; ``tcgen05.mma``
  on sm100. fp8 on sm90's wgmma with an fp32 accumulator: when ``max_num_imprecise_acc <= K`` Triton
  (``WGMMA.cpp``, ``convertDot``; ``WarpGroupDotOp::needsPartialAccumulator``) runs the instructions onto
  a fresh partial accumulator and adds it into the fp32 one (``faddAccumulate``, an ``fadd``: round to
  nearest) every ceil(max_num_imprecise_acc / 32) instructions and after the last; its default on sm90
  is 2**30 (:data:`HOPPER_IMPRECISE_DEFAULT`), so by default the partial sum is *never* promoted and the
  whole K accumulates in the 13-bit wgmma accumulator. ``ieee`` is Triton's FMA dot: one rounding per k.
  Without ``arch`` (the model before attnum 0.x's tensor-core work) every instruction is exact products,
  an exact sum and one round-to-nearest (:data:`K_STEP`); it stays as the comparison the self-test uses.
- **integer tl.dot** (int8 x int8 -> int32: ``mma.sync`` / ``wgmma`` ``.s8.s8.s32``, SageAttention's
  Q K^T): exact products and sums in the int32 accumulator, wrapping modulo 2**32 (no ``.satfinite``);
  :func:`dot_int`. **float -> int casts** (``x.to(tl.int8)``: ``fptosi``, ``cvt.rzi``) truncate toward
  zero; NaN and out-of-range values are LLVM poison and are not modelled (:func:`to_int` raises).
- **reductions** (``tl.sum`` of bf16 / fp16 stays in that format: ``standard.py``, ``_pick_sum_dtype``)
  round after every combine; modelled as a halving tree (the order of a warp's butterfly shuffle).
- **exp / exp2**: ``tl.exp`` lowers to ``ex2.approx.f32`` of ``x * log2(e)``. :func:`exp` is exact
  (correctly rounded fp32) by default; ``approx=True`` models ``ex2.approx`` by the error NVIDIA
  documents for the fast base-2 exponential, 2 ulp (CUDA C++ Programming Guide, "Mathematical
  Functions", ``exp2f``), taken as a relative error of 2**-22 and applied as the worst case (the
  result pushed outward by that much, then rounded to fp32). Not a bit-exact model of the hardware.
- **fp32 multiply-add contraction** (FP fusion, Triton's ``enable_fp_fusion``, on by default through
  Triton 3.9): the NVIDIA backend hands LLVM ``AllowFPOpFusion = Fast`` (``llvm.translate_to_asm``'s
  ``enable_fp_fusion`` argument) and runs ptxas without ``--fmad=false``, so ``a * b + c`` becomes
  ``fma.rn.f32``: one rounding. :func:`mul_add`; without fusion the product is rounded first.
- **d + tl.dot(a, b)** is ``tl.dot(a, b, d)``: Triton's combine pass (``Combine.td``,
  ``CombineDotAddFPattern`` and its reverse: a zero accumulator, the dot result used once,
  ``max_num_imprecise_acc == 0``) removes the add before LLVM sees it, so d is the MMA's accumulator
  (rounded with it per k-step) and no multiply producing d is fused: :func:`dot` with ``acc=d``.
"""

from __future__ import annotations

import math

import torch

from attnum.kernels.triton.tensor_core import _tf32x3_tc, default_imprecise, tensor_core_dot, tf32_rna
from attnum.numerics.fma import fma_round
from attnum.numerics.rounding import round_to

"""The GPUs ``tl.dot`` is modelled for (``attnum audit --arch``): which instruction Triton emits there is
:func:`instruction`, how it rounds is :func:`attnum.numerics.mma.dense.matmul`."""
"""The model's name in verdicts for the default architecture: ``triton-interp:nvidia-sm90``
(:func:`model_name` for the others), with ``,fp-fusion`` when fp32 multiply-adds are contracted."""
"""``max_num_imprecise_acc``'s default for fp8 dots on sm90 (``backends/nvidia/compiler.py``,
``CUDABackend.parse_options``: ``2**30 if capability == 90 else 0``): never promote to fp32."""


PRECISIONS = ("tf32", "tf32x3", "ieee")
EX2_APPROX_REL_ERR = 2.0 ** -22
SATURATING = ("e4m3fn", "e5m2")  # fp8 stores on NVIDIA are cvt.rn.satfinite


def elementwise(op, a: torch.Tensor, b: torch.Tensor, fmt: str) -> torch.Tensor:
    """``op(a, b)`` of two values held in ``fmt`` (bf16 / fp16), as the GPU computes it: in fp32,
    rounded once to ``fmt``. ``op`` is a torch binary function; a bool result is returned as is."""
    r = op(a.float(), b.float())
    return r if r.dtype == torch.bool else round_to(r, fmt)


def mul_add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, fused: bool) -> torch.Tensor:
    """``a * b + c`` of fp32 values as the GPU computes it: one ``fma.rn.f32`` with FP fusion, else
    ``mul.rn`` then ``add.rn`` (the product rounded to fp32 first). Returns float64."""
    a, b, c = a.double(), b.double(), c.double()
    if fused:
        return fma_round(a, b, c, "fp32")
    return round_to(round_to(a * b, "fp32") + c, "fp32")


def unary(op, a: torch.Tensor, fmt: str) -> torch.Tensor:
    """``op(a)`` of a value held in ``fmt``: in fp32, rounded once to ``fmt``."""
    return round_to(op(a.float()), fmt)


def cast(x: torch.Tensor, fmt: str, mode: str = "nearest_even") -> torch.Tensor:
    """A float cast to ``fmt``: one rounding (``mode``) from the exact value; fp8 saturates."""
    return round_to(x.double(), fmt, mode, saturate=fmt in SATURATING)


def tf32_operand(x: torch.Tensor) -> torch.Tensor:
    """What a ``.tf32`` tensor-core operand holds when given fp32 bits: the top 19 bits (truncation)."""
    return round_to(x.float(), "tf32", "toward_zero")


K_STEP = {"tf32": 8, "16": 16, "8": 32, "ieee": 1}
"""The k of one tensor-core instruction (mma.sync m16n8k8 for tf32, m16n8k16 for bf16 / fp16, k32 for
fp8; wgmma's k per instruction is the same): the accumulator is rounded once per k-step. ``ieee`` is
Triton's FMA dot (``FMA.cpp``): one fused multiply-add, one rounding, per k."""


def _mma(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, out_fmt: str, k_step: int) -> torch.Tensor:
    """acc + sum_k a b with exact products, k in steps of ``k_step``, the accumulator rounded to
    ``out_fmt`` after each step."""
    a, b, acc = a.double(), b.double(), acc.double()
    for k0 in range(0, a.shape[-1], k_step):
        acc = round_to(torch.matmul(a[..., k0:k0 + k_step], b[..., k0:k0 + k_step, :]) + acc, out_fmt)
    return acc


def dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, *, precision: str = "tf32",
        operand_bits: int = 32, out_fmt: str = "fp32", arch: str | None = None,
        dtypes: tuple[torch.dtype, torch.dtype] | None = None, max_imprecise: int | None = None,
        num_warps: int = 4) -> torch.Tensor:
    """``tl.dot(a, b, acc, input_precision=precision)``: a (.., M, K), b (.., K, N), acc (.., M, N).

    ``operand_bits``: 32 for fp32 operands (``precision`` applies), 16 for bf16 / fp16 and 8 for fp8
    (used exactly). ``arch``: the GPU whose tensor cores run it (:func:`tensor_core_dot`; ``dtypes`` then
    names the operands' torch dtypes, ``max_imprecise`` the dot's ``max_num_imprecise_acc`` (None: the
    CUDA backend's default, :func:`default_imprecise`),
    ``num_warps`` the launch's); None: the exact-products model. Returns float64 values on ``out_fmt``'s grid."""
    if precision not in PRECISIONS:
        raise ValueError(f"{precision=} must be one of {PRECISIONS}")
    if arch is not None and precision != "ieee":
        if dtypes is None:
            dtypes = (torch.float32, torch.float32) if operand_bits == 32 else \
                ((torch.bfloat16,) * 2 if operand_bits == 16 else (torch.float8_e4m3fn,) * 2)
        if max_imprecise is None:
            max_imprecise = default_imprecise(arch, dtypes)
        if operand_bits != 32 or precision == "tf32":
            return tensor_core_dot(a, b, acc, arch=arch, dtypes=dtypes, out_fmt=out_fmt,
                                   max_imprecise=max_imprecise, num_warps=num_warps)
    if operand_bits != 32:
        return _mma(a, b, acc, out_fmt, K_STEP[str(operand_bits)])
    if precision == "ieee":
        return _mma(a, b, acc, out_fmt, K_STEP["ieee"])
    step = K_STEP["tf32"]
    if precision == "tf32":
        return _mma(tf32_operand(a), tf32_operand(b), acc, out_fmt, step)
    if arch is not None:
        return _tf32x3_tc(a, b, acc, arch, out_fmt)
    a32, b32 = a.float(), b.float()
    a_big, b_big = tf32_rna(a32), tf32_rna(b32)
    a_small, b_small = a32 - a_big, b32 - b_big  # exact in fp32
    zero = torch.zeros(acc.shape, dtype=torch.float64)
    small = _mma(tf32_operand(a_small), tf32_operand(b_big), zero, "fp32", step)
    small = _mma(tf32_operand(a_big), tf32_operand(b_small), small, "fp32", step)
    small = torch.where(torch.isnan(small), zero, small)
    big = _mma(a_big, b_big, small, "fp32", step)
    return round_to(big + acc.double(), out_fmt)


INT_BITS = (8, 16, 32, 64)


def dot_int(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, *, acc_bits: int = 32) -> torch.Tensor:
    """``tl.dot`` of integer operands: exact (int64) products and sums plus ``acc``, wrapped to a
    two's-complement ``acc_bits`` accumulator. Returns int64 values in that range."""
    r = torch.matmul(a.to(torch.int64), b.to(torch.int64)) + acc.to(torch.int64)
    span = 1 << acc_bits
    return (r + span // 2) % span - span // 2


def to_int(x: torch.Tensor, bits: int) -> torch.Tensor:
    """A float -> signed int cast: truncation toward zero (exact in float64: no float rounding). Raises NotImplementedError for NaN, +-inf or a value outside the ``bits``-bit
    range (LLVM's ``fptosi`` gives poison there: what the GPU returns is not specified)."""
    if bits not in INT_BITS:
        raise ValueError(f"{bits=} must be one of {INT_BITS}")
    t = torch.trunc(x.double())
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    bad = ~torch.isfinite(t) | (t < lo) | (t > hi)
    if bool(bad.any()):
        first = x.flatten()[int(bad.flatten().nonzero()[0])].item()
        raise NotImplementedError(f"a float -> int{bits} cast of {first!r} (NaN or out of range: LLVM poison) "
                                  "is not modelled by attnum's faithful interpreter")
    return t.to(torch.int64)


def tree_sum(x: torch.Tensor, dim: int, fmt: str) -> torch.Tensor:
    """Sum along ``dim`` in ``fmt``, rounding after every addition, halving the axis each step
    (element i meets element i + n/2, as in a butterfly shuffle); an odd element left over is added
    to the first one. Float32 in, float32 values on ``fmt``'s grid out (dim removed)."""
    x = x.float().movedim(dim, 0)
    while x.shape[0] > 1:
        n = x.shape[0]
        h = n // 2
        y = round_to(x[:h] + x[h:2 * h], fmt)
        if n % 2:
            y[0] = round_to(y[0] + x[-1], fmt)
        x = y
    return x[0] if x.shape[0] else torch.zeros(x.shape[1:], dtype=torch.float32)


def exp2(x: torch.Tensor, *, approx: bool = False) -> torch.Tensor:
    """2**x of fp32 values: correctly rounded fp32, or (``approx``) pushed outward by ex2.approx's
    maximum relative error first."""
    r = torch.exp2(x.double())
    if approx:
        r = r * (1 + EX2_APPROX_REL_ERR)
    return round_to(r, "fp32")


def exp(x: torch.Tensor, *, approx: bool = False) -> torch.Tensor:
    """e**x of fp32 values; ``approx``: ``ex2.approx(x * log2 e)`` with the product rounded to fp32."""
    if not approx:
        return round_to(torch.exp(x.double()), "fp32")
    return exp2(round_to(x.double() * math.log2(math.e), "fp32"), approx=True)
