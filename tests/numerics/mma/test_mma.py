"""attnum.numerics.mma.dense against MMA-Sim (the published, GPU-validated model; ``mmasim`` 2.1.1) bit for bit.

Per (architecture, operand type, output) that attnum supports: at least 10**5 products, generated rather than
hand-picked: random operands, cancellation, exponent spread wider than F, subnormal products, terms under
the zero exponent (e_zero), overflow, inf and NaN inputs, an accumulator across fp32's range. The compiled
path is compared with mmasim; the plain reference with the compiled path on the same inputs.
"""

from __future__ import annotations

import math
import zlib

import pytest
import torch

from attnum.errors import AttnumInputError
from attnum.numerics.mma import dense as mma
from attnum.numerics.mma.arch import ARCHS

mmasim = pytest.importorskip("mmasim", reason="mmasim (the MMA-Sim oracle, test extra) is not installed")
from mmasim.amd import MFMA  # noqa: E402
from mmasim.nv_ptx import MMA, WGMMA, TCGen05MMA  # noqa: E402

PRODUCTS = 2**17  # per case: >= 10**5
F8 = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2", torch.float8_e4m3fnuz: "fp8",
      torch.float8_e5m2fnuz: "bf8"}
DT = {"tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def oracle(arch: str, a_dtype, b_dtype, out: str):
    """The mmasim operation that models arch's instruction for these operand dtypes and output."""
    d = "f32" if out == "fp32" else "f16"
    t = {torch.float32: "tf32", torch.float16: "f16", torch.bfloat16: "bf16", **F8}
    ta, tb = t[a_dtype], t[b_dtype]
    vendor = ARCHS[arch].vendor_name
    k = {"tf32": 8, "f16": 16, "bf16": 16}.get(ta, 32)
    if arch == "cdna3":
        if ta in ("fp8", "bf8"):
            return MFMA("CDNA3", f"f32_16x16x32_{ta}_{tb}")
        return MFMA("CDNA3", {"tf32": "f32_16x16x8_xf32", "f16": "f32_16x16x16_f16", "bf16": "f32_16x16x16_bf16"}[ta])
    if arch == "sm90":
        return WGMMA(vendor, f"m64n8k{k}.{d}.{ta}.{tb}")
    if arch == "sm100":
        kind = {"tf32": "tf32", "f16": "f16", "bf16": "f16"}.get(ta, "f8f6f4")
        return TCGen05MMA(vendor, f"m64n8k{k}.kind::{kind}.{d}.{ta}.{tb}")
    if arch == "sm70":
        k = 4
    elif arch == "sm75":
        k = 8
    c = "f32" if out == "fp32" else "f16"
    return MMA(vendor, f"m16n8k{k}.{d}.{ta}.{tb}.{c}" if arch != "sm70" else f"m8n8k4.{d}.{ta}.{tb}.{c}")


def cases():
    out = []
    for name, arch in ARCHS.items():
        for kind, inst in arch.instructions.items():
            e4, e5 = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz) if kind == "fp8fnuz" else (
                torch.float8_e4m3fn, torch.float8_e5m2)
            pairs = [(e4, e4), (e5, e5), (e4, e5)] if kind.startswith("fp8") else [(DT[kind], DT[kind])]
            for da, db in pairs:
                for of in inst.outputs:
                    out.append(pytest.param(name, da, db, of, id=f"{name}-{str(da)[6:]}-{str(db)[6:]}-{of}"))
    return out


def _bits(dtype, n, gen):
    """n random bit patterns of dtype, every code equally likely (subnormals, inf and NaN included), as
    float32 (the generators build in float32, whose values every operand dtype's values are)."""
    w = torch.finfo(dtype).bits
    if w == 8:
        return torch.randint(0, 256, (n,), generator=gen, dtype=torch.uint8).view(dtype).float()
    lo, hi = -(2 ** (w - 1)), 2 ** (w - 1)
    it = {16: torch.int16, 32: torch.int32}[w]
    return torch.randint(lo, hi, (n,), generator=gen, dtype=torch.int64).to(it).view(dtype).float()


def _finite_bits(dtype, n, gen):
    x = _bits(dtype, n, gen)
    bad = ~torch.isfinite(x.float())
    x[bad] = 0.0
    return x


def _scaled(dtype, n, gen, lo, hi):
    """Random normals times 2**uniform[lo, hi) (in float64), cast to dtype (NaN-free: fp8 e4m3fn saturates
    nothing, so values past its range are clamped first)."""
    e = torch.randint(lo, hi, (n,), generator=gen).double()
    x = torch.randn(n, generator=gen, dtype=torch.float64) * torch.exp2(e)
    fmax = torch.finfo(dtype).max
    return x.clamp(-fmax, fmax).to(torch.float32).to(dtype).float()


T = 4  # outputs per tile side: each case is G independent (T x K) @ (K x T) + c products


def inputs(da, db, dc, G: int, K: int, seed: int):
    """a (G, T, K), b (G, K, T), c (G, T, T): eight families of tiles, generated (see the module docstring).

    Built as G*T rows of a and of b (b's rows are its columns) in float32, the values of every operand
    dtype; a tile's rows and columns share a family, so each of its T*T outputs sees that family."""
    gen = torch.Generator().manual_seed(seed)
    P = G * T
    fa, fb = torch.finfo(da), torch.finfo(db)
    ea_min, eb_min = int(math.log2(fa.smallest_normal)), int(math.log2(fb.smallest_normal))
    fam = (torch.arange(P) // T) % 8
    fam_c = (torch.arange(G * T * T) // (T * T)) % 8
    a = torch.empty(P, K)
    b = torch.empty(P, K)
    c = _scaled(dc, G * T * T, gen, -8, 8)

    def put(f, x, y, cc=None):
        sel = fam == f
        rows = int(sel.sum())
        a[sel] = x(rows * K).view(rows, K)
        b[sel] = y(rows * K).view(rows, K)
        if cc is not None:
            c[fam_c == f] = cc(rows * T)

    put(0, lambda m: _scaled(da, m, gen, -4, 4), lambda m: _scaled(db, m, gen, -4, 4))  # random
    # exponent spread wider than F (and than the format): every finite code
    put(1, lambda m: _finite_bits(da, m, gen), lambda m: _finite_bits(db, m, gen),
        lambda m: _finite_bits(dc, m, gen))
    # subnormal products and the exponent floor: operands near each format's smallest normal, c zero or tiny
    put(2, lambda m: _scaled(da, m, gen, ea_min - 4, ea_min + 2),
        lambda m: _scaled(db, m, gen, eb_min - 4, eb_min + 2),
        lambda m: _scaled(dc, m, gen, -150, -120) * (torch.rand(m, generator=gen) < 0.5).float())
    # cancellation: the second half of each row is minus the first half, plus a small perturbation
    sel = fam == 3
    rows = int(sel.sum())
    x = _scaled(da, rows * K, gen, -3, 3).view(rows, K)
    y = _scaled(db, rows * K, gen, -3, 3).view(rows, K)
    h = K // 2
    x[:, h:] = -x[:, :h]
    y[:, h:] = y[:, :h]
    half = rows // (2 * T) * T  # the first half of these tiles cancel exactly (c = 0: a zero output)
    x[half:, -1] = _scaled(da, rows - half, gen, -12, -6)
    a[sel], b[sel] = x, y
    x0, y0 = x[:, 0].view(-1, T), y[:, 0].view(-1, T)
    cc = (-x0[:, :, None] * y0[:, None, :]).to(dc).float()  # the other half: c cancels a product too
    cc[: half // T] = 0.0
    c[fam_c == 3] = cc.reshape(-1)
    # overflow: large operands, large c
    big_a, big_b, big_c = (int(math.log2(torch.finfo(d).max)) for d in (da, db, dc))
    put(4, lambda m: _scaled(da, m, gen, big_a - 6, big_a), lambda m: _scaled(db, m, gen, big_b - 6, big_b),
        lambda m: _scaled(dc, m, gen, big_c - 2, big_c))
    # inf and NaN: every code (specials included), with +-inf and NaN sprinkled in (e4m3fn reads inf as NaN)
    def special(d, rate):
        def gen_(m):
            x = _bits(d, m, gen)
            u = torch.rand(m, generator=gen)
            x[u < rate] = torch.inf
            x[(u >= rate) & (u < 2 * rate)] = -torch.inf
            x[(u >= 2 * rate) & (u < 2.5 * rate)] = torch.nan
            return x
        return gen_

    put(5, special(da, 0.25 / K), special(db, 0.25 / K), special(dc, 0.1))  # about one special per output

    # zeros mixed with terms below e_zero (products under 2**-133 / 2**-21 with zeros beside them)
    def sparse(m):
        x = _scaled(da, m, gen, ea_min - 3, ea_min + 8)
        return x * (torch.rand(m, generator=gen) >= 0.4).float()

    put(6, sparse, lambda m: _scaled(db, m, gen, eb_min - 3, eb_min + 8), lambda m: torch.zeros(m))
    # accumulator dominates: small products against a large c (alignment truncates them)
    put(7, lambda m: _scaled(da, m, gen, -8, -2), lambda m: _scaled(db, m, gen, -8, -2),
        lambda m: _scaled(dc, m, gen, 4, 10))
    return (a.view(G, T, K).to(da), b.view(G, T, K).transpose(1, 2).to(db), c.view(G, T, T).to(dc))


def mmasim_dpa(op, a, b, c):
    """mmasim on every output of the tiles: a (G, T, K), b (G, K, T) as (G, T, T, K) vectors."""
    G, _, K = a.shape
    return op.dpa(a[:, :, None, :].expand(G, T, T, K), b.transpose(1, 2)[:, None, :, :].expand(G, T, T, K), c)


def _mismatch(x: torch.Tensor, y: torch.Tensor) -> int:
    it = {torch.float32: torch.int32, torch.float16: torch.int16}[x.dtype]
    assert x.dtype == y.dtype and x.shape == y.shape
    return int((x.view(it) != y.view(it)).sum())


def _shape(arch, da):
    """(G, K): two instructions' K, and enough tiles for PRODUCTS products."""
    K = 2 * ARCHS[arch].instruction(mma._KIND_OF_DTYPE[da]).k
    return -(-PRODUCTS // (K * T * T)), K


@pytest.mark.parametrize("arch,da,db,out", cases())
def test_matches_mmasim_bit_for_bit(arch, da, db, out):
    G, K = _shape(arch, da)
    dc = torch.float32 if out == "fp32" else torch.float16
    a, b, c = inputs(da, db, dc, G, K, seed=zlib.crc32(f"{arch}{da}{db}{out}".encode()))
    want = mmasim_dpa(oracle(arch, da, db, out), a, b, c)
    got = mma.matmul(a, b, c, arch=arch, out_format=out)
    assert G * T * T * K >= 10**5
    bad = _mismatch(got, want)
    where = torch.nonzero(got.view(-1).view(torch.int32 if out == "fp32" else torch.int16)
                          != want.reshape(-1).view(torch.int32 if out == "fp32" else torch.int16))[:3, 0].tolist()
    assert bad == 0, f"{bad} of {got.numel()} outputs ({G * T * T * K} products) differ from mmasim; first: " + str(
        [(i, got.view(-1)[i].item(), want.reshape(-1)[i].item()) for i in where])
    # the generated families reach what they are for (on every case): NaN, inf, zero, tiny and huge outputs
    w = want.double()
    tiny = torch.finfo(dc).smallest_normal
    assert w.isnan().any() and w.isinf().any() and (w == 0).any()
    assert ((w.abs() < tiny) & (w != 0)).any() or out == "fp16" or arch == "cdna3" or da != torch.bfloat16


@pytest.mark.parametrize("arch,da,db,out", cases())
def test_reference_equals_compiled(arch, da, db, out):
    G, K = _shape(arch, da)
    dc = torch.float32 if out == "fp32" else torch.float16
    a, b, c = inputs(da, db, dc, G // 4, K, seed=7)
    got = mma.matmul(a, b, c, arch=arch, out_format=out)
    assert _mismatch(got, mma.matmul_reference(a, b, c, arch=arch, out_format=out)) == 0


@pytest.mark.parametrize("arch,dtype", [("sm90", torch.bfloat16), ("sm89", torch.float8_e4m3fn),
                                        ("cdna3", torch.float16)])
@pytest.mark.parametrize("batch", [(3,), ()])
def test_threads_do_not_change_the_bits(arch, dtype, batch, monkeypatch):
    """The compiled path splits batches (or, for one batch, row blocks) over the caller's threads: the bits are
    those of one thread, specials included (a small work threshold so that small inputs split)."""
    monkeypatch.setattr(mma, "_PRODUCTS_PER_THREAD", 64)
    gen = torch.Generator().manual_seed(13)
    k = ARCHS[arch].instruction(mma._KIND_OF_DTYPE[dtype]).k
    M, N, K = 37, 24, 4 * k
    a = _bits(dtype, math.prod(batch) * M * K, gen).view(*batch, M, K).to(dtype)
    b = _scaled(dtype, K * N, gen, -4, 4).view(K, N).to(dtype)
    c = torch.randn(*batch, M, N, generator=gen).float()
    one = mma._matmul_compiled(a, b, c, arch, "fp32", 1)
    for threads in (2, 5):
        assert _mismatch(mma._matmul_compiled(a, b, c, arch, "fp32", threads), one) == 0
    assert _mismatch(one, mma.matmul_reference(a, b, c, arch=arch)) == 0


@pytest.mark.parametrize("arch,dtype", [("sm90", torch.bfloat16), ("sm80", torch.float16),
                                        ("sm89", torch.float8_e4m3fn), ("cdna3", torch.float32),
                                        ("sm100", torch.float8_e5m2), ("cdna3", torch.float8_e4m3fnuz)])
def test_matmul_layout_chains_instructions(arch, dtype):
    """A real (batch, M, K) @ (K, N) + c with K not a multiple of the instruction: mmasim's own operation
    instruction by instruction on zero-padded tiles, chained through C, equals one matmul call."""
    gen = torch.Generator().manual_seed(3)
    k = ARCHS[arch].instruction(mma._KIND_OF_DTYPE[dtype]).k
    M, N, K = 16, 8, 3 * k - 5
    a = _scaled(dtype, 2 * M * K, gen, -3, 3).view(2, M, K).to(dtype)
    b = _scaled(dtype, K * N, gen, -3, 3).view(K, N).to(dtype)
    c = torch.randn(2, M, N, generator=gen)  # float64, rounded once to fp32 by matmul
    got = mma.matmul(a, b, c, arch=arch)
    op = oracle(arch, dtype, dtype, "fp32")
    pad = 3 * k - K
    ap = torch.cat([a, torch.zeros(2, M, pad, dtype=dtype)], -1)
    bp = torch.cat([b, torch.zeros(pad, N, dtype=dtype)], 0)
    for i in range(2):
        acc = c[i].float()
        for s in range(0, 3 * k, k):
            acc = op(ap[i, :, s:s + k], bp[s:s + k], acc)
        assert _mismatch(got[i], acc) == 0


def test_aliases_and_broadcast():
    gen = torch.Generator().manual_seed(5)
    a = _scaled(torch.bfloat16, 3 * 4 * 32, gen, -2, 2).view(3, 4, 32).bfloat16()
    b = _scaled(torch.bfloat16, 32 * 5, gen, -2, 2).view(32, 5).bfloat16()
    x = mma.matmul(a, b, arch="hopper")
    assert x.shape == (3, 4, 5) and x.dtype == torch.float32
    assert _mismatch(x, mma.matmul(a, b, arch="SM90")) == 0
    assert _mismatch(x, mma.matmul(a, b.expand(3, 32, 5), torch.zeros(5), arch="sm90")) == 0
    # and the model is not the exact sum rounded once: the hardware's truncation shows on some element
    exact = (a.double() @ b.double()).float()
    assert _mismatch(mma.matmul(a, b, arch="sm80"), exact) > 0


@pytest.mark.parametrize("kwargs,words", [
    (dict(arch="sm80", dtype=torch.float8_e4m3fn), ["fp8", "sm80", "tf32, fp16, bf16"]),
    (dict(arch="volta", dtype=torch.bfloat16), ["bf16", "sm70", "fp16 only"]),
    (dict(arch="cdna3", dtype=torch.float8_e5m2), ["fp8", "cdna3", "float8_e5m2fnuz"]),
    (dict(arch="sm90", dtype=torch.float8_e4m3fnuz), ["fp8fnuz", "sm90", "tf32, fp16, bf16, fp8 only"]),
    (dict(arch="sm91", dtype=torch.float16), ["arch='sm91'", "hopper"]),
    (dict(arch="sm90", dtype=torch.float64), ["a.dtype=torch.float64"]),
    (dict(arch="sm90", dtype=torch.bfloat16, out_format="fp16"), ["out_format='fp16'", "('fp32',)"]),
    (dict(arch="sm90", dtype=torch.float16, out_format="bf16"), ["out_format='bf16'"]),
])
def test_input_errors_name_what_is_allowed(kwargs, words):
    dtype = kwargs.pop("dtype")
    a = torch.ones(2, 16, dtype=dtype)
    with pytest.raises(AttnumInputError) as e:
        mma.matmul(a, a.T, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_plain_reference_when_jit_is_off_and_tensors_as_users_hand_them(monkeypatch):
    """ATTNUM_JIT=0 runs the reference (same bits); inputs that require grad, are non-contiguous, or are
    empty go through."""
    gen = torch.Generator().manual_seed(11)
    a = _scaled(torch.float32, 8 * 24, gen, -3, 3).view(24, 8).T.requires_grad_()  # (8, 24), transposed view
    b = _scaled(torch.float32, 24 * 6, gen, -3, 3).view(24, 6)
    c = torch.randn(8, 6, dtype=torch.float64, requires_grad=True)
    fast = mma.matmul(a, b, c, arch="sm80")
    monkeypatch.setenv("ATTNUM_JIT", "0")
    assert _mismatch(fast, mma.matmul(a, b, c, arch="sm80")) == 0
    assert mma.matmul(a[:0], b, arch="sm80").shape == (0, 6)


def test_mixed_and_shape_errors():
    a = torch.ones(2, 16, dtype=torch.float16)
    with pytest.raises(AttnumInputError, match="b.dtype"):
        mma.matmul(a, torch.ones(16, 2, dtype=torch.bfloat16), arch="sm90")
    with pytest.raises(AttnumInputError, match="b.shape"):
        mma.matmul(a, torch.ones(8, 2, dtype=torch.float16), arch="sm90")
    with pytest.raises(AttnumInputError, match="c.shape"):
        mma.matmul(a, a.T, torch.zeros(3, 3), arch="sm90")
