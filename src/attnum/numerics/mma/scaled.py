"""Block-scaled tensor-core products (Blackwell): MXFP8 / MXFP6 / MXFP4 and NVFP4 as the instructions round.

    matmul_block_scaled(a, b, a_scale, b_scale, c=None, *, arch, kind, a_format=None, b_format=None,
                        block=None, scale_format=None) -> Tensor
    # a (..., M, K), b (..., K, N), a_scale (..., M, K // block), b_scale (..., K // block, N),
    # c (..., M, N) or None  ->  (..., M, N) float32

The value of A's element (m, k) is ``a[..., m, k] * a_scale[..., m, k // block]``, of B's element (k, n)
``b[..., k, n] * b_scale[..., k // block, n]``: one scale per row of A and per column of B for every block of
``block`` consecutive k (the layout of MMA-Sim's alpha and beta). ``arch``: sm100 (blackwell;
tcgen05.mma ... block_scale) or sm120 (rtx-blackwell; mma.sync ... block_scale); ``kind`` PTX's:

======== ===================================== ===== ================================== ==========
kind     elements (a_format, b_format)         k     block / scale_format               adder
======== ===================================== ===== ================================== ==========
mxf8f6f4 e4m3 e5m2 e3m2 e2m3 e2m1 (may mix)    32    32 / ue8m0                         ST-FDPA
mxf4     e2m1                                  64    32 / ue8m0                         GST-FDPA
mxf4nvf4 e2m1                                  64    16 / ue4m3 (NVFP4, the default),   GST-FDPA
                                                     16 / ue8m0, 32 / ue8m0
======== ===================================== ===== ================================== ==========

Inputs are plain tensors. ``a`` and ``b`` hold element VALUES: any float dtype whose values are exactly
those of the element format (``a_format`` / ``b_format``: e4m3, e5m2, e3m2, e2m3, e2m1, or attnum's names
e4m3fn, e3m2fn, e2m3fn, e2m1fn; None takes the format from a float8_e4m3fn / float8_e5m2 dtype, and is
e2m1 for the mxf4 kinds); NaN only where the format has it (e4m3, e5m2), inf only in e5m2. The scales hold
scale VALUES: ue8m0 a power of two 2**-127 .. 2**127 or NaN (torch.float8_e8m0fnu, or any float dtype);
ue4m3 an e4m3 value >= 0 (0 .. 448, subnormals included) or NaN (the format has no sign; the hardware
ignores the sign bit, so a negative value is an input error here rather than read as its magnitude).
``scale_format`` None: from a float8_e8m0fnu / float8_e4m3fn scale dtype, else the block's default;
``block`` None: the kind's default (above). ``c``: as in :func:`attnum.numerics.mma.dense.matmul` (a c of another
dtype than float32 is rounded to it once, to nearest even). K must be a multiple of ``block``; a K that is
not a multiple of k is padded with zero elements (scale 1.0), as a kernel pads its last tile (zero terms
take the exponent e_zero, which the accumulator's own exponent already reaches: the padding is invisible).
A value that is not of its format, an arch, kind, element format, block or scale format the instruction
lacks, or a shape that does not fit is an :class:`attnum.errors.AttnumInputError` naming the parameter.

The arithmetic, per instruction (K runs in steps of k, in order; each step's fp32 result is the next one's
accumulator), from MMA-Sim (Xie et al., arXiv 2511.10909; ``mmasim`` 2.1.1, ``arithmetic/fdpa.py``):

- **ST-FDPA** (kind::mxf8f6f4; F = 25, L = 32, e_zero = -133): the 32 exact products, each times its
  scales (A's row scale times B's column scale of the block), and the accumulator c. A product's exponent
  is e_a + e_b + e_alpha + e_beta (an element's binade floored at its format's smallest normal binade;
  e4m3 -6, e5m2 -14, e3m2 -2, e2m3 0, e2m1 0); a zero term (and a zero c) counts as e_zero. Every term is
  aligned to the largest exponent, TRUNCATED to F fraction bits below it, the exact sum rounded toward
  zero to fp32. It is T-FDPA (:mod:`attnum.numerics.mma.dense`) on the scaled operands.
- **GST-FDPA** (kind::mxf4, mxf4nvf4; G = 16, F = 35, L = 64, e_zero = -139): the products are summed
  EXACTLY in groups of G = 16 consecutive k (within one block); each group sum times its scales is one
  term whose exponent is the SCALES' e_alpha + e_beta (each floored at the scale format's smallest normal
  binade: -127 ue8m0, -6 ue4m3), not the sum's own: a group whose 16 products are all zero, or whose scale
  product is zero (ue4m3 0), counts as e_zero; a group whose products cancel to zero keeps its scales'
  exponent (and can truncate the other groups). The four terms and c are then aligned, truncated to F bits,
  summed and rounded toward zero to fp32, as above.

Both: a result of 2**128 or more is inf (not the largest finite fp32); a zero result is +0; NaN and inf go
through as IEEE arithmetic (a NaN scale makes every output that uses it NaN, even beside zero elements,
as 0 * NaN; inf * 0 and inf - inf are NaN); a NaN output is the canonical 0x7FFFFFFF. On both
architectures the constants are the same (MMA-Sim's ``MMABlockScale`` and ``TCGen05MMABlockScale``); they
are data in :mod:`attnum.numerics.mma.arch` (``Arch.block_scaled``).

``matmul_block_scaled_reference`` is the same computation plainly in torch, one group at a time (slow);
``matmul_block_scaled`` runs compiled kernels (ST: :func:`attnum.numerics.mma.dense_kernels.nv_mma` on the scaled
operands; GST: :func:`attnum.numerics.mma.scaled_kernels.gst_mma`), or the reference when ``ATTNUM_JIT=0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.errors import AttnumInputError, bad_value
from attnum.numerics import jit
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.mma.arch import SCALE_FORMATS, BlockScaledInstruction, get_arch
from attnum.numerics.mma.dense import _finish, _pow2, batch_shape, check_dense, check_work
from attnum.numerics.rounding import round_to
from attnum.numerics.threads import one_thread

# PTX's element names -> attnum's formats (the MX element formats; e4m3 is OCP's e4m3fn)
_ELEMENT = {"e4m3": "e4m3fn", "e5m2": "e5m2", "e3m2": "e3m2fn", "e2m3": "e2m3fn", "e2m1": "e2m1fn"}
_ELEMENT_NAMES = {**{k: k for k in _ELEMENT}, **{v: k for k, v in _ELEMENT.items()}}
_FORMAT_OF_DTYPE = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
_SCALE_NAMES = {"ue8m0": "ue8m0", "e8m0": "ue8m0", "ue4m3": "ue4m3"}
_SCALE_OF_DTYPE = {torch.float8_e8m0fnu: "ue8m0", torch.float8_e4m3fn: "ue4m3"}
_SCALE_EMIN = {"ue8m0": -127, "ue4m3": -6}  # the exponent floor of a scale (its smallest normal binade)
_E4M3 = get_format("e4m3fn")
_FP32_EMIN, _OVERFLOW = -126, 2.0**128


@dataclass(frozen=True)
class _Prepared:
    """Validated operands, batch dims flattened into B, K padded to whole instructions (all float64)."""

    inst: BlockScaledInstruction
    batch: tuple
    av: torch.Tensor  # (B, M, K)
    bv: torch.Tensor  # (B, K, N)
    sa: torch.Tensor  # (B, M, K // block)
    sb: torch.Tensor  # (B, K // block, N)
    c: torch.Tensor  # (B, M, N)
    fa: FloatFormat
    fb: FloatFormat
    block: int
    scale_format: str


def _element_format(name, x: torch.Tensor, param: str, inst: BlockScaledInstruction) -> FloatFormat:
    if name is None:
        name = _FORMAT_OF_DTYPE.get(x.dtype, "e2m1" if inst.elements == ("e2m1",) else None)
        if name is None:
            raise AttnumInputError(f"{param}=None is not allowed with a {x.dtype} operand for kind={inst.kind!r}; "
                                   f"expected one of {inst.elements} (or a float8_e4m3fn / float8_e5m2 operand)")
    ptx = _ELEMENT_NAMES.get(name.strip().lower()) if isinstance(name, str) else None
    if ptx not in inst.elements:
        raise bad_value(param, name, f"one of {inst.elements} for kind={inst.kind!r}"
                        + (f" (attnum's names {[_ELEMENT[e] for e in inst.elements]} too)" if ptx is None else ""))
    return get_format(_ELEMENT[ptx])


def _operand(x, param: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise bad_value(param, getattr(x, "dtype", type(x).__name__), "a floating-point torch.Tensor")
    if x.dim() < 2:
        raise bad_value(f"{param}.shape", tuple(x.shape), "(..., rows, cols)")
    return x


def _values_of(x: torch.Tensor, fmt: FloatFormat, param: str) -> torch.Tensor:
    """x's values (float64), each one of ``fmt`` (NaN / inf only where the format has them)."""
    v = x.detach().to(torch.float64)
    finite = torch.isfinite(v)
    ok = torch.where(finite, round_to(torch.where(finite, v, 0.0), fmt) == v,
                     torch.isnan(v) if fmt.has_nan else torch.zeros_like(finite))
    if fmt.has_inf:
        ok |= torch.isinf(v)
    if not bool(ok.all()):
        bad = v[~ok][0].item()
        raise AttnumInputError(f"{param} holds {bad!r}, which is not allowed: expected values of {fmt.name} "
                               f"(|x| <= {fmt.max:g} on its grid{', NaN' if fmt.has_nan else ''}"
                               f"{', inf' if fmt.has_inf else ''}); round to it first (attnum.round_to)")
    return v


def _scales_of(x, sf: str, param: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not (x.is_floating_point() or x.dtype == torch.float8_e8m0fnu):
        raise bad_value(param, getattr(x, "dtype", type(x).__name__), "a floating-point torch.Tensor of scale values")
    v = x.detach().to(torch.float64)
    nan = torch.isnan(v)
    if sf == "ue8m0":
        m, e = torch.frexp(v)
        ok = nan | ((m == 0.5) & (e >= -126) & (e <= 128))
        allowed = "ue8m0 values: powers of two 2**-127 .. 2**127, or NaN"
    else:
        finite = torch.isfinite(v)
        ok = nan | (finite & (v >= 0) & (round_to(torch.where(finite, v, 0.0), _E4M3) == v))
        allowed = "ue4m3 values: e4m3 values >= 0 (0 .. 448), or NaN"
    if not bool(ok.all()):
        raise AttnumInputError(f"{param} holds {v[~ok][0].item()!r}, which is not allowed; expected {allowed}")
    return v + 0.0  # -0 -> +0


def _prepare(a, b, a_scale, b_scale, c, arch, kind, a_format, b_format, block, scale_format) -> _Prepared:
    check_dense(a=a, b=b, a_scale=a_scale, b_scale=b_scale, c=c)
    inst = get_arch(arch).block_scaled_instruction(kind)
    a, b = _operand(a, "a"), _operand(b, "b")
    fa = _element_format(a_format, a, "a_format", inst)
    fb = _element_format(b_format, b, "b_format", inst)
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2 or K < 1:
        raise AttnumInputError(f"b.shape={tuple(b.shape)} is not allowed with a.shape={tuple(a.shape)}; expected "
                               "(..., K, N) with the same K >= 1 as a's (..., M, K)")
    blocks = sorted({bl for bl, _ in inst.scales})
    if block is None:
        block = inst.default_block
    elif not isinstance(block, int) or isinstance(block, bool) or block not in blocks:  # 16.0, a tensor: no
        raise bad_value("block", block, f"one of the integers {blocks} for kind={inst.kind!r}")
    if scale_format is None:
        sf = _SCALE_OF_DTYPE.get(getattr(a_scale, "dtype", None)) or inst.scale_format_for(block)
    else:
        sf = _SCALE_NAMES.get(scale_format.strip().lower()) if isinstance(scale_format, str) else None
        if sf is None:
            raise bad_value("scale_format", scale_format, f"one of {SCALE_FORMATS}")
    if (block, sf) not in inst.scales:
        pairs = ", ".join(f"block={bl} with {s}" for bl, s in inst.scales)
        raise AttnumInputError(f"scale_format={sf!r} with block={block} is not allowed for kind={inst.kind!r}; "
                               f"expected {pairs}")
    if K % block:
        raise AttnumInputError(f"a.shape={tuple(a.shape)} is not allowed with block={block}; expected K "
                               f"a multiple of the block")
    nblk = K // block
    sa, sb = _scales_of(a_scale, sf, "a_scale"), _scales_of(b_scale, sf, "b_scale")
    if sa.dim() < 2 or tuple(sa.shape[-2:]) != (M, nblk):
        raise bad_value("a_scale.shape", tuple(sa.shape), f"(..., M, K // block) = (..., {M}, {nblk})")
    if sb.dim() < 2 or tuple(sb.shape[-2:]) != (nblk, N):
        raise bad_value("b_scale.shape", tuple(sb.shape), f"(..., K // block, N) = (..., {nblk}, {N})")
    batch = batch_shape(a=a.shape, b=b.shape, a_scale=sa.shape, b_scale=sb.shape)
    if c is not None:
        if not isinstance(c, torch.Tensor) or not c.is_floating_point():
            raise bad_value("c", type(c).__name__, "None or a float torch.Tensor")
        try:
            batch = torch.broadcast_shapes(batch, c.shape[:-2]) if c.dim() >= 2 else batch
            cb = c.detach().broadcast_to((*batch, M, N))
        except RuntimeError:
            raise bad_value("c.shape", tuple(c.shape), f"broadcastable to {(*batch, M, N)}") from None
    pad = (-K) % inst.k
    check_work(batch, M, K + pad, N, a=a, b=b)  # the scales add K / block per row and column: well inside
    if c is None:
        c64 = torch.zeros((*batch, M, N), dtype=torch.float64)
    else:
        c64 = cb.to(torch.float64) if c.dtype == torch.float32 else round_to(cb.to(torch.float64), "fp32")
    av, bv = _values_of(a, fa, "a"), _values_of(b, fb, "b")
    if pad:  # whole instructions: zero elements under scale 1 (padded blocks: the kind's blocks divide k)
        av, bv = torch.nn.functional.pad(av, (0, pad)), torch.nn.functional.pad(bv, (0, 0, 0, pad))
        sa = torch.nn.functional.pad(sa, (0, pad // block), value=1.0)
        sb = torch.nn.functional.pad(sb, (0, 0, 0, pad // block), value=1.0)
    Kp, nb = K + pad, math.prod(batch)

    def flat(x, *tail):
        return x.broadcast_to((*batch, *tail)).reshape(nb, *tail).contiguous()

    return _Prepared(inst, tuple(batch), flat(av, M, Kp), flat(bv, Kp, N), flat(sa, M, Kp // block),
                     flat(sb, Kp // block, N), c64.reshape(nb, M, N).contiguous(), fa, fb, block, sf)


def _exponent(x: torch.Tensor, emin: int) -> torch.Tensor:
    """floor(log2|x|) floored at emin (int64); for a zero, inf or NaN max(-1, emin) (frexp's exponent 0,
    as MMA-Sim reads it; a zero's exponent is replaced by e_zero, a special's never changes a result)."""
    _, e = torch.frexp(x)
    return torch.clamp(e.to(torch.int64) - 1, min=emin)


def _fused_group(terms: torch.Tensor, exps: torch.Tensor, c: torch.Tensor, inst) -> torch.Tensor:
    """One fused group: terms (B, M, N, n) float64 with their exponents (e_zero already in place), the
    accumulator c (B, M, N) -> the fp32 result (as float64)."""
    ec = torch.where(c == 0, inst.e_zero, _exponent(c, _FP32_EMIN))
    e_max = torch.maximum(exps.amax(-1), ec)
    scale = _pow2(inst.F - e_max)
    # every term aligned to e_max and truncated to F fraction bits below it: integers, summed exactly
    acc = torch.trunc(terms * scale[..., None]).sum(-1) + torch.trunc(c * scale)
    value = acc * _pow2(e_max - inst.F)  # exact (|acc| < 2**50)
    out = round_to(value, "fp32", "toward_zero")
    out = torch.where(value.abs() >= _OVERFLOW, value.sign() * torch.inf, out)  # inf, not the largest fp32
    return out + 0.0  # -0 -> +0


def _st_terms(p: _Prepared, k0: int):
    """ST-FDPA's terms for the instruction at k0: (B, M, N, k) scaled products and their exponents."""
    g = slice(k0, k0 + p.inst.k)
    blk = k0 // p.block  # k == block: one scale per row / column
    a, b = p.av[:, :, g], p.bv[:, g, :].transpose(1, 2)  # (B, M, k), (B, N, k)
    sa, sb = p.sa[:, :, blk], p.sb[:, blk, :]  # (B, M), (B, N)
    e_scale = _exponent(sa, _SCALE_EMIN["ue8m0"])[:, :, None] + _exponent(sb, _SCALE_EMIN["ue8m0"])[:, None, :]
    terms = a[:, :, None, :] * b[:, None, :, :] * (sa[:, :, None] * sb[:, None, :])[..., None]
    exps = (_exponent(a, p.fa.emin)[:, :, None, :] + _exponent(b, p.fb.emin)[:, None, :, :]
            + e_scale[..., None])
    return terms, torch.where(terms == 0, p.inst.e_zero, exps)


def _gst_terms(p: _Prepared, k0: int):
    """GST-FDPA's terms for the instruction at k0: one per group of G products, (B, M, N, k // G)."""
    G, terms, exps = p.inst.G, [], []
    emin = _SCALE_EMIN[p.scale_format]
    for g0 in range(k0, k0 + p.inst.k, G):
        g, blk = slice(g0, g0 + G), g0 // p.block
        prods = p.av[:, :, None, g] * p.bv[:, g, :].transpose(1, 2)[:, None, :, :]  # (B, M, N, G), exact
        sa, sb = p.sa[:, :, blk, None], p.sb[:, None, blk, :]  # (B, M, 1), (B, 1, N)
        s = sa * sb
        terms.append(prods.sum(-1) * s)  # the group's exact sum, then its scale (exact)
        e = _exponent(sa, emin) + _exponent(sb, emin)
        exps.append(torch.where((prods == 0).all(-1) | (s == 0), p.inst.e_zero, e))
    return torch.stack(terms, -1), torch.stack(exps, -1)


def matmul_block_scaled_reference(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                                  c: torch.Tensor | None = None, *, arch: str, kind: str, a_format: str | None = None,
                                  b_format: str | None = None, block: int | None = None,
                                  scale_format: str | None = None) -> torch.Tensor:
    """:func:`matmul_block_scaled`, plainly: torch, one instruction (one fused group) at a time over every
    (batch, M, N) at once."""
    p = _prepare(a, b, a_scale, b_scale, c, arch, kind, a_format, b_format, block, scale_format)
    r = p.c
    for k0 in range(0, p.av.shape[-1], p.inst.k):
        terms, exps = (_st_terms if p.inst.adder == "st" else _gst_terms)(p, k0)
        r = _fused_group(terms, exps, r, p.inst)
    return _finish(r, p.batch, "fp32")


def matmul_block_scaled(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                        c: torch.Tensor | None = None, *, arch: str, kind: str, a_format: str | None = None,
                        b_format: str | None = None, block: int | None = None,
                        scale_format: str | None = None) -> torch.Tensor:
    """(..., M, K) @ (..., K, N) + c with block scales, as ``arch``'s ``kind::KIND`` block_scale instruction
    computes it (see the module docstring for the arguments and the arithmetic).

    a_scale (..., M, K // block) scales A's rows, b_scale (..., K // block, N) B's columns, one per block of
    K. Returns (..., M, N) float32 on a's device (the arithmetic runs on the CPU)."""
    kw = dict(arch=arch, kind=kind, a_format=a_format, b_format=b_format, block=block, scale_format=scale_format)
    check_dense(a=a, b=b, a_scale=a_scale, b_scale=b_scale, c=c)
    tensors = (a, b, a_scale, b_scale, c)
    on = [x.device for x in tensors if isinstance(x, torch.Tensor) and x.device.type != "cpu"]
    if on:  # the model runs on the CPU; the result goes back where a was
        cpu = [x.cpu() if isinstance(x, torch.Tensor) else x for x in tensors]
        return matmul_block_scaled(*cpu, **kw).to(a.device if isinstance(a, torch.Tensor) else on[0])
    if not jit.enabled():
        return matmul_block_scaled_reference(a, b, a_scale, b_scale, c, **kw)
    threads = torch.get_num_threads()
    with one_thread():  # element-wise passes: an OpenMP team costs more than it saves; the kernels split
        p = _prepare(a, b, a_scale, b_scale, c, arch, kind, a_format, b_format, block, scale_format)
        return _compiled(p, threads)


_PRODUCTS_PER_THREAD = 1 << 20  # products a thread is given at least (as attnum.numerics.mma.dense)


def _split(run, nb: int, M: int, work: int, threads: int) -> None:
    """run(batch slice, row slice) over up to ``threads`` threads: whole batches, or for one batch row
    blocks; every output is one call's, so the bits do not depend on the split."""
    parts = max(1, min(threads, work // _PRODUCTS_PER_THREAD, nb if nb > 1 else M))
    if parts == 1:
        run(slice(None), slice(None))
        return
    n = nb if nb > 1 else M
    cuts = [n * t // parts for t in range(parts + 1)]
    sls = [slice(cuts[t], cuts[t + 1]) for t in range(parts)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(parts) as pool:  # the kernels release the GIL (nogil)
        list(pool.map(lambda s: run(s, slice(None)) if nb > 1 else run(slice(None), s), sls))


def _compiled(p: _Prepared, threads: int) -> torch.Tensor:
    from attnum.numerics.mma import dense_kernels as mk

    nb, M, K = p.av.shape
    N = p.bv.shape[-1]
    out = torch.empty_like(p.c)
    inst = p.inst
    if inst.adder == "st":
        # the power-of-two scales folded into the operands (exact), their exponents added to the elements'
        # (a zero element keeps ZERO_EXP, far below e_zero; a NaN scale's exponent is 0: the result is NaN)
        nblk, bl = K // p.block, p.block
        e_sa = torch.where(torch.isnan(p.sa), 0, _exponent(p.sa, _SCALE_EMIN["ue8m0"])).to(torch.int32)
        e_sb = torch.where(torch.isnan(p.sb), 0, _exponent(p.sb, _SCALE_EMIN["ue8m0"])).to(torch.int32)
        ea, eb = torch.empty(p.av.shape, dtype=torch.int32), torch.empty(p.bv.shape, dtype=torch.int32)
        mk.exponents(p.av.numpy().reshape(-1), p.fa.emin, ea.numpy().reshape(-1))
        mk.exponents(p.bv.numpy().reshape(-1), p.fb.emin, eb.numpy().reshape(-1))
        ea.view(nb, M, nblk, bl).add_(e_sa[..., None])
        eb.view(nb, nblk, bl, N).add_(e_sb[:, :, None, :])
        av = (p.av.view(nb, M, nblk, bl) * p.sa[..., None]).view(nb, M, K)
        bv = (p.bv.view(nb, nblk, bl, N) * p.sb[:, :, None, :]).view(nb, K, N)
        arrays = [x.numpy() for x in (av, ea, bv, eb, p.c, out)]
        consts = (inst.L, inst.F, inst.e_zero, _FP32_EMIN, inst.fp32_mbits, _FP32_EMIN, False, _OVERFLOW)

        def run(bs, rs):
            x_a, x_ea, x_b, x_eb, x_c, x_out = arrays
            mk.nv_mma(x_a[bs, rs], x_ea[bs, rs], x_b[bs], x_eb[bs], x_c[bs, rs], x_out[bs, rs], *consts)

        _split(run, nb, M, nb * M * N * K, threads)
        return _finish(out, p.batch, "fp32")

    from attnum.numerics.mma import scaled_kernels as sk

    emin_s = _SCALE_EMIN[p.scale_format]
    ea = _exponent(p.sa, emin_s).to(torch.int32).numpy()
    eb = _exponent(p.sb, emin_s).to(torch.int32).numpy()
    arrays = [p.av.numpy(), p.bv.numpy(), p.sa.numpy(), ea, p.sb.numpy(), eb, p.c.numpy(), out.numpy()]
    consts = (inst.G, inst.L // inst.G, p.block // inst.G, inst.F, inst.e_zero, _FP32_EMIN, inst.fp32_mbits,
              _FP32_EMIN, _OVERFLOW)

    def run(bs, rs):
        x_a, x_b, x_sa, x_ea, x_sb, x_eb, x_c, x_out = arrays
        sk.gst_mma(x_a[bs, rs], x_b[bs], x_sa[bs, rs], x_ea[bs, rs], x_sb[bs], x_eb[bs], x_c[bs, rs], x_out[bs, rs],
                   *consts)

    _split(run, nb, M, nb * M * N * K, threads)
    return _finish(out, p.batch, "fp32")
