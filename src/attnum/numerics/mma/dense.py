"""Tensor cores as they round: a matrix multiply computed as a named GPU architecture's MMA instructions do.

    matmul(a, b, c=None, *, arch, out_format="fp32") -> Tensor
    # a (..., M, K), b (..., K, N), c (..., M, N) or None  ->  (..., M, N), float32 or float16

The operand type comes from the dtypes: float16, bfloat16, float32 (as TF32: the low 13 mantissa bits are
ignored, as the hardware reads them), float8_e4m3fn and float8_e5m2 (the two may mix). ``arch`` is one of
sm70 sm75 sm80 sm89 sm90 sm100 sm120 cdna3 or an alias (volta turing ampere ada hopper blackwell
rtx-blackwell mi300); the instruction and its constants per architecture are data in
:mod:`attnum.numerics.mma.arch`. K runs in the instruction's steps, in order (padded with zeros to a whole
instruction); each step is k / L groups; the result of one group is the accumulator of the next.

One group on NVIDIA (MMA-Sim's "T-FDPA"; Khattak & Mikaitis' model is the same):
  1. the L exact products and the accumulator c, each with its exponent (an operand's binade, floored at
     its format's smallest normal binade; a zero term counts as the instruction's ``e_zero``);
  2. every term aligned to the largest exponent e_max and TRUNCATED to F fraction bits below it;
  3. the (exact) sum normalised and rounded: toward zero to fp32 (to 13 fraction bits, "FP22", for FP8 on
     Ada and Hopper), or to nearest even to fp16; past the format's range it is inf; a zero is +0.
  An inf or NaN term makes the group's result the IEEE sum of those terms (inf, or NaN for inf - inf or
  inf * 0); a NaN output is the canonical 0x7FFFFFFF (fp32) / 0x7FFF (fp16), as MMA-Sim writes it.
On CDNA3 (MI300, MMA-Sim's "TR-FDPA"): the products alone are truncated to F = 24 bits and summed; that sum
and c are aligned by rounding DOWN (F2 + 1 = 32 and 24 bits); the sum is rounded down to 31 fraction bits,
then to nearest fp32. A product of 2**128 or more is inf. CDNA3's FP8 (the FNUZ encodings,
torch.float8_e4m3fnuz / float8_e5m2fnuz; "GTR-FDPA") sums the even and odd products separately, rounds both
down to the larger one's grid, and drops an accumulator more than F + 1 binades below the sum.

Sources and where they differ. The constants are MMA-Sim's (Xie et al., arXiv 2511.10909; mmasim 2.1.1),
which is also the test oracle (bit for bit). Khattak & Mikaitis (arXiv 2512.07004) give the same F per
architecture and the same FP8 rule on Ada/Hopper (F = 13, an fp32 output truncated to e8m13); attnum
follows MMA-Sim where the two are not spelled alike because MMA-Sim is executable and was checked against
every instruction listed here, so a disagreement would be a test failure rather than a reading. One
difference of scope: MMA-Sim models Blackwell's (sm100 tcgen05, sm120 mma.sync) FP8 with F = 25 and a full
fp32 output, and attnum does too; the FP22 output is an Ada/Hopper property only.

``matmul_reference`` is the same computation written plainly in torch, one group at a time (slow); ``matmul``
runs the compiled kernels of :mod:`attnum.numerics.mma.dense_kernels` (or the reference when ``ATTNUM_JIT=0``).

Blackwell's block-scaled instructions (MXFP8 / MXFP6 / MXFP4 / NVFP4) are :mod:`attnum.numerics.mma.scaled`
(``matmul_block_scaled``, ``matmul_block_scaled_reference``), which builds on this module.
"""

from __future__ import annotations

import math

import torch

from attnum.errors import AttnumInputError
from attnum.numerics import jit
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.mma.arch import OUT_FORMATS, Arch, Instruction, get_arch
from attnum.numerics.rounding import round_to
from attnum.numerics.threads import one_thread

_KIND_OF_DTYPE = {torch.float32: "tf32", torch.float16: "fp16", torch.bfloat16: "bf16",
                  torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8",
                  torch.float8_e4m3fnuz: "fp8fnuz", torch.float8_e5m2fnuz: "fp8fnuz"}
# The exponent floor of each operand dtype: its smallest normal binade (subnormals sit in it, below 1).
_EMIN = {torch.float32: -126, torch.float16: -14, torch.bfloat16: -126, torch.float8_e4m3fn: -6,
         torch.float8_e5m2: -14, torch.float8_e4m3fnuz: -7, torch.float8_e5m2fnuz: -15}
_OUT = {"fp32": (torch.float32, -126, 127), "fp16": (torch.float16, -14, 15)}  # dtype, emin, emax
_NAN_BITS = {"fp32": (torch.int32, 0x7FFFFFFF), "fp16": (torch.int16, 0x7FFF)}
_E8M13 = FloatFormat(ebits=8, mbits=13, name="e8m13")


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """2**e as float64 from the IEEE bits (exact; e an integer tensor in -1022..1023)."""
    return ((e.to(torch.int64) + 1023) << 52).view(torch.float64)


def _binade(x: torch.Tensor, emin: int) -> torch.Tensor:
    """floor(log2|x|) floored at emin, int64 (x float64; 0 for a zero, inf or NaN: callers replace it)."""
    _, e = torch.frexp(x)
    return torch.clamp(e.to(torch.int64) - 1, min=emin)


def _values(x: torch.Tensor) -> torch.Tensor:
    """An operand's exact values (float64). float32 is read as TF32: the low 13 mantissa bits are dropped
    (toward zero), as the tensor core reads an fp32 register."""
    x = x.detach()
    if x.dtype == torch.float32:
        x = (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)
    return x.to(torch.float64)


def check_dense(**tensors) -> None:
    """Each of ``tensors`` (name=value; None allowed) a dense torch.Tensor holding values: a sparse, nested or
    meta tensor (no values to read) is an AttnumInputError naming it, before anything moves or is read."""
    for name, x in tensors.items():
        if x is None or not isinstance(x, torch.Tensor):
            continue  # None, or not a tensor at all: the callers' own checks name what is expected
        if x.layout != torch.strided or x.is_nested or x.is_meta:
            kind = "nested" if x.is_nested else ("meta" if x.is_meta else str(x.layout).replace("torch.", ""))
            raise AttnumInputError(f"{name}={kind} tensor is not allowed; expected a dense (strided) torch.Tensor "
                                   "with values on a real device")


def batch_shape(**shapes: tuple[int, ...]) -> torch.Size:
    """The broadcast of the operands' batch dimensions (all but the last two of each of ``shapes``, name=shape),
    or an AttnumInputError naming the shapes."""
    try:
        return torch.broadcast_shapes(*(tuple(s)[:-2] for s in shapes.values()))
    except RuntimeError:
        named = ", ".join(f"{n}.shape={tuple(s)}" for n, s in shapes.items())
        raise AttnumInputError(f"{named} is not allowed: their batch dimensions do not broadcast; expected leading "
                               "dimensions that broadcast (as torch.matmul's)") from None


MAX_WORK_BYTES = 4 << 30
"""What one call may hold beside its inputs: the operands broadcast to the batch as float64 values with
their int32 exponents, and the float64 accumulator and output (a stride-0 ``expand`` of a small tensor
asks for all of it). Past it, one line; the batch in slices gives the same bits."""


def check_work(batch, M: int, Kp: int, N: int, **operands: torch.Tensor) -> None:
    """Refuse, before anything is allocated, a product whose working set exceeds :data:`MAX_WORK_BYTES`."""
    nb = math.prod(batch)
    need = nb * (M * Kp + Kp * N) * (8 + 4) + nb * M * N * (8 + 8 + 4)
    if need > MAX_WORK_BYTES:
        named = ", ".join(f"{n}.shape={tuple(x.shape)}" for n, x in operands.items())
        raise AttnumInputError(f"{named} is not allowed: broadcast to the batch {tuple(batch)} the product would "
                               f"hold {need / 2**30:.1f} GiB of float64 values (at most {MAX_WORK_BYTES / 2**30:g} "
                               "GiB); expected a smaller batch (slices of it give the same bits)")


def operand_kind(dtype: torch.dtype) -> str:
    """The instruction kind (:data:`attnum.numerics.mma.arch.OPERAND_KINDS`) that reads operands of ``dtype``."""
    if dtype not in _KIND_OF_DTYPE:
        raise AttnumInputError(f"dtype={dtype} is not allowed; expected one of {list(_KIND_OF_DTYPE)}")
    return _KIND_OF_DTYPE[dtype]


def _kind(a: torch.Tensor, b: torch.Tensor) -> str:
    allowed = "torch.float16, bfloat16, float32 (TF32), float8_e4m3fn, float8_e5m2 (or the fnuz FP8s, cdna3)"
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, torch.Tensor):
            raise AttnumInputError(f"{name}={type(x).__name__} is not allowed; expected a torch.Tensor")
        if x.dtype not in _KIND_OF_DTYPE:
            raise AttnumInputError(f"{name}.dtype={x.dtype} is not allowed; expected {allowed}")
        if x.dim() < 2:
            raise AttnumInputError(f"{name}.shape={tuple(x.shape)} is not allowed; expected (..., rows, cols)")
    ka, kb = _KIND_OF_DTYPE[a.dtype], _KIND_OF_DTYPE[b.dtype]
    if ka != kb or (not ka.startswith("fp8") and a.dtype != b.dtype):
        raise AttnumInputError(f"b.dtype={b.dtype} is not allowed with a.dtype={a.dtype}; expected the same "
                               "dtype (or two FP8s of one family: e4m3fn with e5m2, e4m3fnuz with e5m2fnuz)")
    return ka


def _prepare(a, b, c, arch, out_format):
    """Validate; return (instruction, batch shape, av (B, M, K), bv (B, K, N), c64 (B, M, N)): the operands'
    values (float64), the batch dimensions broadcast and flattened into B, K padded to whole instructions."""
    kind = _kind(a, b)
    ar: Arch = get_arch(arch)
    inst: Instruction = ar.instruction(kind)
    if out_format not in OUT_FORMATS:
        raise AttnumInputError(f"out_format={out_format!r} is not allowed; expected one of {OUT_FORMATS}")
    if out_format not in inst.outputs:
        raise AttnumInputError(f"out_format={out_format!r} is not allowed for {kind} on {ar.name} ({inst.name}); "
                               f"expected one of {inst.outputs}")
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2 or K < 1:
        raise AttnumInputError(f"b.shape={tuple(b.shape)} is not allowed with a.shape={tuple(a.shape)}; expected "
                               "(..., K, N) with the same K >= 1 as a's (..., M, K)")
    batch = batch_shape(a=a.shape, b=b.shape)
    dtype = _OUT[out_format][0]
    if c is not None:
        if not isinstance(c, torch.Tensor) or not c.is_floating_point():
            what = c.dtype if isinstance(c, torch.Tensor) else type(c).__name__
            raise AttnumInputError(f"c={what} is not allowed; expected None or a float torch.Tensor")
        try:
            batch = torch.broadcast_shapes(batch, c.shape[:-2]) if c.dim() >= 2 else batch
            cb = c.detach().broadcast_to((*batch, M, N))
        except RuntimeError:
            raise AttnumInputError(f"c.shape={tuple(c.shape)} is not allowed; expected broadcastable to "
                                   f"{(*batch, M, N)}") from None
    pad = (-K) % inst.k  # a partial last instruction reads zeros, as a kernel's padded tile
    check_work(batch, M, K + pad, N, a=a, b=b)
    if c is None:
        c64 = torch.zeros((*batch, M, N), dtype=torch.float64)
    else:  # c is held in the output format: a c of another dtype is rounded to it once (nearest even)
        c64 = cb.to(torch.float64) if c.dtype == dtype else round_to(cb.to(torch.float64), out_format)
    av, bv = _values(a), _values(b)
    if pad:
        av, bv = torch.nn.functional.pad(av, (0, pad)), torch.nn.functional.pad(bv, (0, 0, 0, pad))
    shape_a, shape_b = (*batch, M, K + pad), (*batch, K + pad, N)
    nb = math.prod(batch)
    flat = [x.broadcast_to(s).reshape(nb, *s[-2:]).contiguous() for x, s in ((av, shape_a), (bv, shape_b))]
    return inst, batch, *flat, c64.reshape(nb, M, N).contiguous()


def _finish(r: torch.Tensor, batch, out_format: str) -> torch.Tensor:
    """float64 values of the output format -> that dtype (exact), NaN as the canonical bit pattern."""
    out = r.to(_OUT[out_format][0])
    int_dtype, nan = _NAN_BITS[out_format]
    bits = out.view(int_dtype)
    bits[torch.isnan(out)] = nan
    return bits.view(out.dtype).reshape(*batch, *out.shape[-2:])


def matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None, *, arch: str,
           out_format: str = "fp32") -> torch.Tensor:
    """(..., M, K) @ (..., K, N) + c as ``arch``'s MMA instructions compute it (see the module docstring).

    Returns (..., M, N) float32 (``out_format="fp32"``) or float16 (``"fp16"``, where the instruction has
    an fp16 accumulator), on a's device (the arithmetic itself runs on the CPU). An operand type or output the architecture lacks is an AttnumInputError naming
    what it has."""
    check_dense(a=a, b=b, c=c)
    on = [x.device for x in (a, b, c) if isinstance(x, torch.Tensor) and x.device.type != "cpu"]
    if on:  # the model runs on the CPU (numba / float64 bit work); the result goes back where a was
        cpu = [x.cpu() if isinstance(x, torch.Tensor) else x for x in (a, b, c)]
        return matmul(*cpu, arch=arch, out_format=out_format).to(a.device if isinstance(a, torch.Tensor) else on[0])
    if not jit.enabled():
        return matmul_reference(a, b, c, arch=arch, out_format=out_format)
    threads = torch.get_num_threads()
    with one_thread():
        return _matmul_compiled(a, b, c, arch, out_format, threads)


_PRODUCTS_PER_THREAD = 1 << 20  # products a thread is given at least: below, a thread costs more than it saves


def _matmul_compiled(a, b, c, arch, out_format, threads: int = 1):
    """The compiled kernels, on up to ``threads`` threads (the caller's intra-op threads, as torch's own
    matmul would use): disjoint batches (or, for one batch, disjoint row blocks) per thread; every output
    element is one thread's chain, so the bits do not depend on the thread count."""
    from attnum.numerics.mma import dense_kernels as mk

    inst, batch, av, bv, c64 = _prepare(a, b, c, arch, out_format)
    ea, eb = torch.empty(av.shape, dtype=torch.int32), torch.empty(bv.shape, dtype=torch.int32)
    mk.exponents(av.numpy().reshape(-1), _EMIN[a.dtype], ea.numpy().reshape(-1))
    mk.exponents(bv.numpy().reshape(-1), _EMIN[b.dtype], eb.numpy().reshape(-1))
    out = torch.empty_like(c64)
    if inst.adder != "t":
        kernel, consts = mk.cdna3_mma, (inst.L, inst.F, 31, inst.adder == "gtr")
    else:
        _, emin, emax = _OUT[out_format]
        mbits = 10 if out_format == "fp16" else inst.fp32_mbits
        e_zero = inst.e_zero16 if out_format == "fp16" else inst.e_zero32
        kernel = mk.nv_mma
        consts = (inst.L, inst.F, e_zero, emin, mbits, emin, out_format == "fp16", 2.0 ** (emax + 1))
    nb, M, K = av.shape
    parts = max(1, min(threads, av.numel() * bv.shape[-1] // _PRODUCTS_PER_THREAD, nb if nb > 1 else M))
    arrays = [x.numpy() for x in (av, ea, bv, eb, c64, out)]
    if parts == 1:
        kernel(*arrays, *consts)
        return _finish(out, batch, out_format)
    axis_len = nb if nb > 1 else M
    cuts = [axis_len * t // parts for t in range(parts + 1)]

    def run(t: int) -> None:
        sl = slice(cuts[t], cuts[t + 1])
        if nb > 1:  # whole batches: every slice stays C-contiguous
            kernel(*(x[sl] for x in arrays), *consts)
        else:  # one batch, row blocks: a's, c's and out's rows; all of b
            x_a, x_ea, x_b, x_eb, x_c, x_out = arrays
            kernel(x_a[:, sl], x_ea[:, sl], x_b, x_eb, x_c[:, sl], x_out[:, sl], *consts)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(parts) as pool:  # the kernels release the GIL (nogil)
        list(pool.map(run, range(parts)))
    return _finish(out, batch, out_format)


def matmul_reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None, *, arch: str,
                     out_format: str = "fp32") -> torch.Tensor:
    """:func:`matmul`, plainly: torch, one group of L products at a time over all (batch, M, N) at once."""
    check_dense(a=a, b=b, c=c)
    inst, batch, av, bv, r = _prepare(a, b, c, arch, out_format)
    ea, eb = _binade(av, _EMIN[a.dtype]), _binade(bv, _EMIN[b.dtype])
    bv, eb = bv.transpose(1, 2), eb.transpose(1, 2)  # (B, N, K)
    for k0 in range(0, av.shape[-1], inst.L):
        g = slice(k0, k0 + inst.L)
        p = av[:, :, None, g] * bv[:, None, :, g]  # (B, M, N, L) exact products
        e = ea[:, :, None, g] + eb[:, None, :, g]
        group = _nv_group if inst.adder == "t" else _cdna3_group
        r = group(p, e, r, inst, out_format)
    return _finish(r, batch, out_format)


def _nv_group(p, e, c, inst: Instruction, out_format: str) -> torch.Tensor:
    """One NVIDIA group: (B, M, N, L) products p with exponents e, accumulator c (B, M, N) -> (B, M, N)."""
    _, emin, emax = _OUT[out_format]
    e_zero = inst.e_zero16 if out_format == "fp16" else inst.e_zero32
    e = torch.where(p == 0, e_zero, e)
    ec = torch.where(c == 0, e_zero, _binade(c, emin))
    e_max = torch.maximum(e.amax(-1), ec)
    scale = _pow2(inst.F - e_max)
    # rounding site "mma.align": each term truncated to F fraction bits below e_max (exact integers)
    acc = torch.trunc(p * scale[..., None]).sum(-1) + torch.trunc(c * scale)
    value = acc * _pow2(e_max - inst.F)  # exact: |acc| < 2**36
    # rounding site "mma.normalize": the group's sum to the output format
    if out_format == "fp16":
        out = round_to(value, "fp16")  # nearest even; past 65504 (from 65520 up) inf
    else:
        fmt = get_format("fp32") if inst.fp32_mbits == 23 else _E8M13
        out = round_to(value, fmt, "toward_zero")
        out = torch.where(value.abs() >= 2.0 ** (emax + 1), value.sign() * torch.inf, out)  # inf, not max
    return out + 0.0  # -0 -> +0, as the adder's result


def _floor_grid(x: torch.Tensor, mbits: int, emin: int) -> torch.Tensor:
    """x rounded down (toward -inf) to mbits fraction bits above the exponent floor emin (float64, exact).
    round_to has no toward-negative mode, so CDNA3's round-down is written out here."""
    q = _pow2(_binade(x, emin) - mbits)
    return torch.where(x == 0, x, torch.floor(x / q) * q)


def _cdna3_group(p, e, c, inst: Instruction, out_format: str) -> torch.Tensor:
    """One CDNA3 group: the products' truncated sum (FP8: two interleaved halves, each rounded down to the
    larger one's grid), then (rounding down) the accumulator, then fp32."""
    F = inst.F
    p = torch.where(p.abs() >= 2.0**128, p.sign() * torch.inf, p)  # the product overflows first
    e = torch.where(p == 0, -999, e)
    halves = [(p[..., 0::2], e[..., 0::2]), (p[..., 1::2], e[..., 1::2])] if inst.adder == "gtr" else [(p, e)]
    # rounding site "mma.align" (products only): integers n of 2**(e_h - F) per half
    sums = []
    for ph, eh in halves:
        e_h = eh.amax(-1)
        sums.append((torch.trunc(ph / _pow2(e_h.clamp(min=-1000 + F) - F)[..., None]).sum(-1), e_h))
    e_dot = torch.stack([e_h for _, e_h in sums]).amax(0)
    # rounding site "mma.align_halves": each half down to e_dot's F-bit grid (one half: exact)
    dot = sum(torch.floor(n * _pow2((e_h - e_dot).clamp(min=-1000))) for n, e_h in sums)
    dot = dot * _pow2(e_dot.clamp(min=-1000 + F) - F)
    ec = torch.where(c == 0, -126, _binade(c, -126))  # an inf or NaN c: -1 (its frexp exponent), as MMA-Sim
    e_max = torch.maximum(e_dot, ec)
    # rounding site "mma.align_down": the dot sum to 32 and c to 24 fraction bits below e_max, rounding down
    q_dot, q_c = _pow2(e_max - 32), _pow2(e_max - F)
    c_part = torch.floor(c / q_c) * q_c
    if inst.adder == "gtr":  # FP8: an accumulator more than F + 1 binades below the sum is dropped
        c_part = torch.where(ec < e_max - F - 1, 0.0, c_part)
    s = torch.floor(dot / q_dot) * q_dot + c_part
    # rounding site "mma.normalize": down to 31 fraction bits, then nearest fp32 (inf past its range)
    return round_to(_floor_grid(s, 31, -126), "fp32")

