"""Which tensor-core instruction Triton emits for a ``tl.dot`` per GPU architecture and operand type, and how
it accumulates: the tensor-core half of the faithful Triton model (:mod:`attnum.kernels.triton.model`).
The rounding itself is :func:`attnum.numerics.mma.dense.matmul`; the sources (Triton's NVIDIA backend) are cited
in :mod:`attnum.kernels.triton.model`'s docstring and docs/tensor-cores.md."""

from __future__ import annotations

import torch

from attnum.numerics.rounding import round_to

ARCHES = ("sm80", "sm89", "sm90", "sm100")


DEFAULT_ARCH = "sm90"


MODEL = f"nvidia-{DEFAULT_ARCH}"


HOPPER_IMPRECISE_DEFAULT = 2 ** 30


def check_arch(arch: str) -> str:
    from attnum.errors import bad_value
    from attnum.numerics.mma.sites import ALIASES

    a = ALIASES.get(arch.strip().lower(), arch.strip().lower()) if isinstance(arch, str) else arch
    if a not in ARCHES:
        raise bad_value("arch", arch, f"one of {', '.join(ARCHES)} (or hopper, ampere, ada, blackwell)")
    return a


def model_name(arch: str = DEFAULT_ARCH) -> str:
    return f"nvidia-{check_arch(arch)}"


def tf32_rna(x: torch.Tensor) -> torch.Tensor:
    """``cvt.rna.tf32.f32``: round to nearest, ties away from zero."""
    return round_to(x.float(), "tf32", "nearest_away")


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def default_imprecise(arch: str, dtypes: tuple[torch.dtype, torch.dtype]) -> int:
    """``max_num_imprecise_acc`` of a ``tl.dot`` that does not set it (``semantic.py``, ``dot``): the
    backend's default for fp8 x fp8 (2**30 on sm90, else 0), 0 for other operands."""
    fp8 = all(d in _FP8 for d in dtypes)
    return HOPPER_IMPRECISE_DEFAULT if fp8 and arch == "sm90" else 0


def instruction(arch: str, dtypes: tuple[torch.dtype, torch.dtype], shape: tuple[int, ...], *,
                out_fmt: str = "fp32", max_imprecise: int = 0, num_warps: int = 4) -> str:
    """The instruction Triton lowers a ``tl.dot`` to (``TritonGPU/Transforms/AccelerateMatmul.cpp``,
    ``getMMAVersionSafe`` / ``supportMMA``): ``mma.sync``, ``wgmma`` or ``tcgen05``. ``shape``: the
    result's (.., M, N). Raises NotImplementedError where Triton or the validated models have none."""
    fp8 = any(d in _FP8 for d in dtypes)
    if arch == "sm80" and fp8:
        if torch.float8_e4m3fn in dtypes:  # CUDABackend.parse_options: fp8e4nv only for capability >= 89
            raise NotImplementedError("tl.dot of float8e4nv on sm80: Triton supports it from sm89 on "
                                      "(backends/nvidia/compiler.py supported_fp8_dtypes)")
        raise NotImplementedError("tl.dot of float8e5 on sm80: Ampere has no fp8 MMA, and how Triton widens the "
                                  "operands there is not modelled by attnum")
    if arch == "sm90":
        two_d = len(shape) == 2 and shape[-2] % 64 == 0 and shape[-1] % 8 == 0 and num_warps % 4 == 0
        if two_d and not (fp8 and out_fmt == "fp32" and max_imprecise < 32):
            return "wgmma"
        if fp8:
            raise NotImplementedError("tl.dot of fp8 on sm90 lowered to mma.sync (batched, M % 64 != 0, "
                                      "num_warps % 4 != 0 or max_num_imprecise_acc < 32): Hopper's fp8 mma.sync "
                                      "is not in MMA-Sim's validated instruction set (--arch sm89 runs it as Ada's, "
                                      "which is)")
        return "mma.sync"
    if arch == "sm100":
        return "tcgen05"
    return "mma.sync"


def tensor_core_dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, *, arch: str,
                    dtypes: tuple[torch.dtype, torch.dtype], out_fmt: str = "fp32", max_imprecise: int = 0,
                    num_warps: int = 4) -> torch.Tensor:
    """``tl.dot`` of operands holding ``dtypes`` values on ``arch``'s tensor cores (float64 out on
    ``out_fmt``'s grid): :func:`attnum.numerics.mma.dense.matmul`, the whole K onto ``acc``; for fp8 on sm90's
    wgmma with ``max_imprecise <= K`` and an fp32 accumulator, Triton's partial accumulation (module
    docstring): each group of ceil(max_imprecise / 32) k32 instructions from a zero accumulator, then
    added into the fp32 accumulator with one round-to-nearest addition."""
    from attnum.numerics.mma import dense as mma

    check_arch(arch)
    ins = instruction(arch, dtypes, tuple(acc.shape), out_fmt=out_fmt, max_imprecise=max_imprecise,
                      num_warps=num_warps)
    at, bt = a.to(dtypes[0]), b.to(dtypes[1])
    c32 = acc.to(torch.float16 if out_fmt == "fp16" else torch.float32)
    K = a.shape[-1]
    if not (ins == "wgmma" and dtypes[0] in _FP8 and out_fmt == "fp32" and max_imprecise <= K):
        return mma.matmul(at, bt, c32, arch=arch, out_format=out_fmt).double()
    step = 32 * max(1, -(-max_imprecise // 32))  # numLowPrecisionAcc += 32 per wgmma; add once >= max
    d = None if not bool(acc.any()) else acc.double()  # isZeroConst(c): no add onto a zero accumulator
    for k0 in range(0, K, step):
        part = mma.matmul(at[..., k0:k0 + step], bt[..., k0:k0 + step, :], None, arch=arch,
                          out_format="fp32").double()
        d = part if d is None else round_to(d + part, "fp32")
    return d


def _tf32x3_tc(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, arch: str, out_fmt: str) -> torch.Tensor:
    """``tf32x3`` on tensor cores: the three TF32 dots of ``F32DotTC.cpp`` each run by :func:`tensor_core_dot`."""
    a32, b32 = a.float(), b.float()
    a_big, b_big = tf32_rna(a32), tf32_rna(b32)
    a_small, b_small = a32 - a_big, b32 - b_big
    zero = torch.zeros(acc.shape, dtype=torch.float64)
    f32 = (torch.float32, torch.float32)
    small = tensor_core_dot(a_small, b_big, zero, arch=arch, dtypes=f32)
    small = tensor_core_dot(a_big, b_small, small, arch=arch, dtypes=f32)
    small = torch.where(torch.isnan(small), zero, small)
    big = tensor_core_dot(a_big, b_big, small, arch=arch, dtypes=f32)
    return round_to(big + acc.double(), out_fmt)
