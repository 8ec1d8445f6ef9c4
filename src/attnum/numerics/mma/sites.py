"""A policy's matmul sites as tensor-core instructions: ``mma=ARCH`` (:mod:`attnum.numerics.mma.dense`).

A policy with ``mma`` set runs its two attention matmuls (Q K^T and P V, and the backward's) as the
named architecture's MMA instructions instead of the exact-chunk model of ``matmul_acc`` /
``reduction_chunk``: each operand is cast to the torch dtype of the format it lies on (``inputs`` for
Q, K and V, ``probs`` for P; exact, since the policy has already rounded it there), then
:func:`attnum.numerics.mma.dense.matmul` computes the product with fp32 output, K in instruction steps, each
step the instruction's alignment, truncation and final rounding. fp32 operands run as TF32 (what a
tensor core reads from them); an operand format with no tensor-core type (fp64, a custom format) is
an input error.

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


def matmul(a: torch.Tensor, b: torch.Tensor, *, arch: str, a_fmt: FloatFormat | str, b_fmt: FloatFormat | str,
           c: torch.Tensor | None = None, a_site: str = "inputs", b_site: str = "inputs") -> torch.Tensor:
    """a @ b (+ c) as ``arch``'s MMA instructions with fp32 output, returned in a's dtype (the carrier).

    ``a_fmt`` / ``b_fmt``: the formats a and b lie on (their sites' formats); the cast to that format's
    torch dtype is exact. Broadcasting over the leading dimensions as ``torch.matmul``."""
    from attnum.numerics.mma import dense as mma

    carrier = a.dtype
    a_t = a.to(operand_dtype(a_fmt, site=a_site))
    b_t = b.to(operand_dtype(b_fmt, site=b_site))
    if a_t.dtype != b_t.dtype and {a_t.dtype, b_t.dtype} != {torch.float8_e4m3fn, torch.float8_e5m2}:
        # mixed 16-bit / fp8 operands: no single instruction takes them; the wider type holds both exactly
        wide = a_t.dtype if a_t.dtype.itemsize >= b_t.dtype.itemsize else b_t.dtype
        a_t, b_t = a.to(wide), b.to(wide)
    cc = None if c is None else c.to(torch.float32)
    out = mma.matmul(a_t, b_t, cc, arch=arch, out_format="fp32")
    return out.to(carrier)
