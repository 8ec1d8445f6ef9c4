"""A policy's matmul sites as tensor-core instructions: ``mma=ARCH`` (:mod:`attnum.numerics.mma.dense`).

A policy with ``mma`` set runs its two attention matmuls (Q K^T and P V, and the backward's) as the
named architecture's MMA instructions instead of the exact-chunk model of ``matmul_acc`` /
``reduction_chunk``: each operand is cast to the torch dtype of the format it lies on (``inputs`` for
Q, K and V, ``probs`` for P; exact, since the policy has already rounded it there), then
:func:`attnum.numerics.mma.dense.matmul` computes the product with fp32 output, K in instruction steps, each
step the instruction's alignment, truncation and final rounding. fp32 operands run as TF32 (what a
tensor core reads from them); an operand format with no tensor-core type (fp64, a custom format) is
an input error.

One instruction, one operand type (:func:`operand_dtypes`). An MMA reads A and B in one type: PTX's
``mma.sync`` / ``wgmma`` / ``tcgen05.mma`` name it once (``.bf16``, ``.f16``, ``.tf32``; NVIDIA PTX ISA,
"Warp-level matrix multiply-accumulate instructions"), and MMA-Sim models each instruction with one input
format; only FP8 mixes its two encodings (``.e4m3.e5m2``). So when P and V lie on different formats a
kernel converts one of them before the product, and the only conversion that adds no rounding the policy
does not name is of the operand whose format the other's type holds exactly: fp8 P with bf16 V runs as
bf16 (``cvt`` fp8 -> bf16 is exact), a bf16 P with fp32 V as TF32. bf16 and fp16 hold each other in
neither direction (bf16's 2^17 overflows fp16; fp16's 1 + 2^-9 rounds in bf16), so a policy pairing them
(``fa2:bf16,probs=fp16,mma=sm90``) is refused: a kernel would have to round P or V again, and which one
it does is the policy's to name (set ``probs`` to the ``inputs`` format: FlashAttention converts P to V's
type). An operand type the architecture lacks (bf16 on sm70) is refused with the policy, before any work.

Shapes: a (..., M, K), b (..., K, N), c (..., M, N) fp32 values or None; the result (..., M, N) in the
carrier's dtype, on the fp32 grid.
"""

from __future__ import annotations

import torch

from attnum.errors import AttnumInputError, bad_value
from attnum.numerics.formats import FloatFormat, get_format

POLICY_ARCHES = ("sm70", "sm75", "sm80", "sm89", "sm90", "sm100", "sm120", "cdna3")
"""What ``mma=`` accepts (and the aliases of :data:`ALIASES`); which operand types each has is
:mod:`attnum.numerics.mma.dense`'s to say."""
ALIASES = {"volta": "sm70", "turing": "sm75", "ampere": "sm80", "ada": "sm89", "lovelace": "sm89",
           "hopper": "sm90", "blackwell": "sm100", "rtx-blackwell": "sm120", "mi300": "cdna3"}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32,
           "e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def check_arch(value: object, *, param: str = "mma") -> str | None:
    """The canonical architecture name of ``value`` (``hopper`` -> ``sm90``); None for none/exact/off."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_value(param, value, f"one of {POLICY_ARCHES} (or an alias: {sorted(ALIASES)}), or none")
    v = value.strip().lower()
    if v in ("", "none", "exact", "off"):
        return None
    v = ALIASES.get(v, v)
    if v not in POLICY_ARCHES:
        raise bad_value(param, value, f"one of {POLICY_ARCHES} (or an alias: {sorted(ALIASES)}), or none")
    return v


def operand_dtype(fmt: FloatFormat | str, *, site: str = "inputs") -> torch.dtype:
    """The tensor-core operand type of values on ``fmt``'s grid (fp32 -> float32, read as TF32)."""
    f = get_format(fmt)
    dt = _DTYPES.get(f.name)
    if dt is None:
        raise AttnumInputError(f"policy {site}={f.name!r} is not allowed with mma=...; a tensor core takes "
                               f"operands in {sorted(set(_DTYPES) - {'tf32'})}")
    return dt


def _read_format(dt: torch.dtype) -> FloatFormat:
    """The values a tensor core reads from an operand of dtype ``dt`` (float32 as TF32)."""
    return get_format({torch.float32: "tf32", torch.float16: "fp16", torch.bfloat16: "bf16",
                       torch.float8_e4m3fn: "e4m3fn", torch.float8_e5m2: "e5m2"}[dt])


def operand_dtypes(a_fmt: FloatFormat | str, b_fmt: FloatFormat | str, *, arch: str, a_site: str = "inputs",
                   b_site: str = "inputs") -> tuple[torch.dtype, torch.dtype]:
    """The dtypes one of ``arch``'s MMA instructions reads a (on ``a_fmt``) and b (on ``b_fmt``) in.

    Their own types when they agree (or are the two FP8s, which mix); else the type of the operand whose
    format holds the other's exactly, for both. An AttnumInputError when neither holds the other (bf16
    with fp16: no instruction takes the pair and every conversion rounds) or ``arch`` has no instruction
    for the type (module docstring)."""
    from attnum.numerics.mma.arch import get_arch
    from attnum.numerics.mma.dense import operand_kind

    fa, fb = get_format(a_fmt), get_format(b_fmt)
    da, db = operand_dtype(fa, site=a_site), operand_dtype(fb, site=b_site)
    if da != db and operand_kind(da) != operand_kind(db):
        if fa.fits_in(_read_format(db)):
            da = db
        elif fb.fits_in(_read_format(da)):
            db = da
        else:
            raise AttnumInputError(
                f"policy {a_site}={fa.name} with {b_site}={fb.name} is not allowed with mma={arch}: one MMA "
                f"instruction reads both operands in one type (PTX .bf16.bf16 or .f16.f16) and neither format "
                f"holds the other, so a kernel would round {a_site} or {b_site} again; expected {a_site} and "
                f"{b_site} on one format (or one whose values the other holds: fp8 with bf16, bf16 with fp32)")
    try:
        get_arch(arch).instruction(operand_kind(da))
    except AttnumInputError as why:
        named = f"{a_site}={fa.name}" + ("" if (a_site, fa) == (b_site, fb) else f", {b_site}={fb.name}")
        raise AttnumInputError(f"policy {named} with mma={arch} is not allowed: {why}") from None
    return da, db


def matmul(a: torch.Tensor, b: torch.Tensor, *, arch: str, a_fmt: FloatFormat | str, b_fmt: FloatFormat | str,
           c: torch.Tensor | None = None, a_site: str = "inputs", b_site: str = "inputs") -> torch.Tensor:
    """a @ b (+ c) as ``arch``'s MMA instructions with fp32 output, returned in a's dtype (the carrier).

    ``a_fmt`` / ``b_fmt``: the formats a and b lie on (their sites' formats); the casts to the operand
    types of :func:`operand_dtypes` are exact. Broadcasting over the leading dimensions as ``torch.matmul``."""
    from attnum.numerics.mma import dense as mma

    carrier = a.dtype
    da, db = operand_dtypes(a_fmt, b_fmt, arch=arch, a_site=a_site, b_site=b_site)
    cc = None if c is None else c.to(torch.float32)
    out = mma.matmul(a.to(da), b.to(db), cc, arch=arch, out_format="fp32")
    return out.to(carrier)
