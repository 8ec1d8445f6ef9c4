"""attnum.numerics.mma.scaled (block-scaled MMA, Blackwell) against MMA-Sim (``mmasim`` 2.1.1) bit for bit.

Every (arch, kind, element types, block, scale type) mmasim models on sm100 (tcgen05.mma) and sm120
(mma.sync): kind::mxf8f6f4 with all 25 element-type pairs (block32, ue8m0), kind::mxf4 (block32 ue8m0) and
kind::mxf4nvf4 (block16 ue4m3, block16 ue8m0, block32 ue8m0). Per (arch, kind) at least 10**5 products,
generated in ten families of (4 x K) @ (K x 4) tiles, two instructions' K each: random; every code
(specials included) under any scale; cancellation (within a block; in GST-FDPA within a 16-product group);
scales spread wide between blocks; scale extremes (2**-127, 2**127, NaN; ue4m3 0, 2**-9, 448, NaN);
subnormal elements under tiny scales beside a tiny or zero accumulator; zero blocks (and ue4m3 zero
scales); overflow to inf; inf and NaN in c; terms around and under e_zero beside zeros and a zero or tiny
accumulator (ue4m3: subnormal scales, whose floored exponent sets the alignment of a small c). The compiled path and the plain reference are both compared
with mmasim on the same inputs. Element codes are decoded to values here, from their bit fields, and
encoded for mmasim as it takes them (torch float8 dtypes; fp6 / fp4 in uint8, fp4 packed two per byte
for the k = 64 kinds), so a decoding slip on either side is a mismatch.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from attnum.errors import AttnumInputError
from attnum.numerics.mma import scaled as ms
from attnum.numerics.mma.arch import ARCHS

mmasim = pytest.importorskip("mmasim", reason="mmasim (the MMA-Sim oracle, test extra) is not installed")
from mmasim.nv_ptx import MMABlockScale, TCGen05MMABlockScale  # noqa: E402

TARGET = 10**5  # products per (arch, kind), summed over its combinations
T = 4  # outputs per tile side
FAMILIES = 10
# element formats: (exponent bits, mantissa bits, specials) -- "fn": NaN at the top code, "ieee": inf and NaN
FMT = {"e4m3": (4, 3, "fn"), "e5m2": (5, 2, "ieee"), "e3m2": (3, 2, "none"), "e2m3": (2, 3, "none"),
       "e2m1": (2, 1, "none")}
TYPES = list(FMT)
ARCH_NAMES = {"sm100": "Blackwell", "sm120": "RTX Blackwell"}


def combos():
    """(kind, a type, b type, block, scale type) as mmasim lists them; every one on both architectures."""
    out = [("mxf8f6f4", ta, tb, 32, "ue8m0") for ta in TYPES for tb in TYPES]
    out.append(("mxf4", "e2m1", "e2m1", 32, "ue8m0"))
    out += [("mxf4nvf4", "e2m1", "e2m1", bl, s) for bl, s in ((16, "ue4m3"), (16, "ue8m0"), (32, "ue8m0"))]
    return out


def n_combos(kind):
    return sum(1 for c in combos() if c[0] == kind)


def oracle(arch, kind, ta, tb, block, st):
    if kind == "mxf8f6f4":
        if arch == "sm100":
            return TCGen05MMABlockScale("Blackwell", f"m128n8k32.kind::mxf8f6f4.block32.f32.{ta}.{tb}.ue8m0")
        return MMABlockScale("RTX Blackwell", f"m16n8k32.kind::mxf8f6f4.block32.f32.{ta}.{tb}.f32.ue8m0")
    if arch == "sm100":
        return TCGen05MMABlockScale("Blackwell", f"m128n8k64.kind::{kind}.block{block}.f32.e2m1.e2m1.{st}")
    return MMABlockScale("RTX Blackwell", f"m16n8k64.kind::{kind}.block{block}.f32.e2m1.e2m1.f32.{st}")


# ---- codes and values -----------------------------------------------------------------------------------
def decode(codes: torch.Tensor, t: str) -> torch.Tensor:
    """Element codes (int64) of format t -> float64 values, from the bit fields."""
    E, M, specials = FMT[t]
    bias = 2 ** (E - 1) - 1
    sign = (codes >> (E + M)) & 1
    e = (codes >> M) & (2**E - 1)
    m = (codes & (2**M - 1)).double()
    v = torch.where(e == 0, m * 2.0 ** (1 - bias - M), (1 + m / 2**M) * torch.exp2((e - bias).double()))
    if specials == "fn":
        v = torch.where((e == 2**E - 1) & (m == 2**M - 1), torch.nan, v)
    elif specials == "ieee":
        v = torch.where(e == 2**E - 1, torch.where(m == 0, torch.inf, torch.nan), v)
    return torch.where(sign == 1, -v, v)


def finite_codes(t, shape, gen):
    """Random codes of t, specials replaced by the largest finite code of their sign."""
    E, M, specials = FMT[t]
    x = torch.randint(0, 2 ** (1 + E + M), shape, generator=gen)
    top = (2**E - 1) << M
    if specials == "fn":
        x = torch.where((x & (top | (2**M - 1))) == (top | (2**M - 1)), x - 1, x)
    elif specials == "ieee":
        x = torch.where((x & top) == top, (x & ~top) | ((2**E - 2) << M), x)
    return x


def max_code(t):
    E, M, specials = FMT[t]
    return {"fn": (2**E << M) - 2, "ieee": ((2**E - 1) << M) - 1, "none": (2**E << M) - 1}[specials]


def scale_decode(codes, st):
    if st == "ue8m0":
        return torch.where(codes == 255, torch.nan, torch.exp2((codes - 127).double()))
    return decode(codes, "e4m3")  # ue4m3: codes 0 .. 127, e4m3's positive half


def scale_codes(st, shape, gen, family):
    """Scale codes for a family (see the module docstring)."""
    r = lambda lo, hi: torch.randint(lo, hi, shape, generator=gen)  # noqa: E731
    u = torch.rand(shape, generator=gen)
    if st == "ue8m0":
        if family == 0 or family == 2 or family == 8:
            return r(119, 136)  # 2**-8 .. 2**8
        if family == 1:
            return torch.where(u < 0.03, 255, r(0, 255))  # anything, NaN now and then
        if family == 3:  # blocks far apart: 2**+-(40..100), alternating
            hi, lo = r(127 + 40, 127 + 100), r(127 - 100, 127 - 40)
            alt = (torch.arange(shape[-1]) % 2 == 0).expand(shape)
            return torch.where(alt, hi, lo)
        if family == 4:  # the extremes and NaN
            pick = torch.tensor([0, 1, 253, 254, 127, 0, 254, 255])
            return pick[torch.where(u < 0.06, 7, r(0, 7))]
        if family == 5:  # the first half of the rows / columns tiny (2**-127 .. 2**-118), the rest moderate
            return torch.where(torch.arange(shape[0])[:, None] < shape[0] // 2, r(0, 10), r(100, 127))
        if family == 6:
            return r(120, 134)
        if family == 9:  # scale products 2**-175 .. 2**-140: terms around and under e_zero
            return r(127 - 90, 127 - 69) if shape[0] == T else r(127 - 85, 127 - 69)
        return r(240, 255)  # overflow
    # ue4m3 (0x38 = 1.0; 0x7E = 448; 0x01 = 2**-9; 0x7F NaN)
    if family == 0 or family == 2 or family == 8:
        return r(0x20, 0x50)
    if family == 1:
        return torch.where(u < 0.03, 0x7F, r(0, 0x7F))
    if family == 3:
        alt = (torch.arange(shape[-1]) % 2 == 0).expand(shape)
        return torch.where(alt, r(0x70, 0x7F), r(0x01, 0x10))
    if family == 4:
        pick = torch.tensor([0x00, 0x01, 0x7E, 0x7D, 0x38, 0x08, 0x07, 0x7F])
        return pick[torch.where(u < 0.06, 7, r(0, 7))]
    if family == 5:  # the first half of the rows / columns zero (their terms take e_zero), the rest small
        return torch.where(torch.arange(shape[0])[:, None] < shape[0] // 2, 0, r(0x08, 0x38))
    if family == 6:
        return torch.where(u < 0.3, 0, r(0x30, 0x40))  # zero scales beside zero blocks
    if family == 9:  # subnormal scales (2**-9 .. 7 * 2**-9): their exponent floor -6 sets the alignment
        return r(0x01, 0x08)
    return r(0x70, 0x7F)


def c_values(family, gen, st, n=T * T):
    u = torch.rand(n, generator=gen)
    x = torch.randn(n, generator=gen, dtype=torch.float64)
    if family == 1:  # any finite fp32 pattern
        b = torch.randint(-(2**31), 2**31, (n,), generator=gen, dtype=torch.int64).to(torch.int32).view(torch.float32)
        return torch.where(torch.isfinite(b), b, 0.0)
    if family == 2:  # the first half of the rows (whose A rows cancel exactly) get c = 0: a zero output
        return torch.where(torch.arange(n) < n // 2, 0.0, x.float())
    if family == 6:
        return torch.where(u < 0.5, 0.0, x.float())
    if family == 3:
        return (x * torch.exp2(torch.randint(-60, 60, (n,), generator=gen).double())).float()
    if family == 5:  # zero or an fp32 subnormal: the outputs whose terms vanish are c, subnormal
        return torch.where(u < 0.25, 0.0, (x * torch.exp2(torch.randint(-148, -127, (n,), generator=gen).double())).float())
    if family == 7:
        return (x.sign() * 2.0**127 * (1 + torch.rand(n, generator=gen, dtype=torch.float64) * 0.99)).float()
    if family == 9:  # ue8m0: zero (the alignment floor is e_zero) or tiny; ue4m3: just under the scales' terms
        if st == "ue4m3":
            return (x * torch.exp2(torch.randint(-50, -30, (n,), generator=gen).double())).float()
        return torch.where(u < 0.5, 0.0, (x * torch.exp2(torch.randint(-140, -110, (n,), generator=gen).double())).float())
    if family == 8:  # inf and NaN among finite values
        c = (x * 4).float()
        c[u < 0.2] = torch.inf
        c[(u >= 0.2) & (u < 0.4)] = -torch.inf
        c[(u >= 0.4) & (u < 0.55)] = torch.nan
        return c
    return (x * torch.exp2(torch.randint(-4, 4, (n,), generator=gen).double())).float()


def element_codes(t, family, K, block, G, gen, negate=True):
    """(T, K) codes for a tile's rows (A) or columns (B) of one family (cancellation: A's second halves
    negate the first, ``negate``; B's repeat them)."""
    E, M, specials = FMT[t]
    shape = (T, K)
    x = finite_codes(t, shape, gen)
    sign = torch.randint(0, 2, shape, generator=gen) << (E + M)
    u = torch.rand(shape, generator=gen)
    if family == 1:  # every code, specials included
        x = torch.randint(0, 2 ** (1 + E + M), shape, generator=gen)
    elif family == 2:  # cancellation: within each run of `half` the second half negates the first
        half = (G or block) // 2
        v = x.view(T, K // (2 * half), 2, half)
        v[:, :, 1] = v[:, :, 0] ^ (1 << (E + M)) if negate else v[:, :, 0]
        x = v.reshape(T, K)
        if negate:  # the second half of the rows: a few elements perturbed (no exact cancellation)
            x = torch.where((u < 0.04) & (torch.arange(T)[:, None] >= T // 2), finite_codes(t, shape, gen), x)
    elif family == 5:  # subnormal elements (and zeros)
        x = sign | torch.randint(0, 2**M, shape, generator=gen)
    elif family == 6:  # whole zero blocks
        x = x.view(T, K // block, block)
        x[torch.rand(T, K // block, generator=gen) < 0.4] = 0
        x = x.reshape(T, K)
    elif family == 7:  # near the largest element, one sign per row mostly
        x = torch.where(u < 0.8, max_code(t) | (sign[:, :1] * torch.ones_like(x)), x)
    elif family == 9:  # zeros among the terms
        x = torch.where(u < 0.3, 0, x)
    elif family == 8 and specials != "none":  # an inf / NaN element now and then
        sp = (2**E - 1) << M if specials == "ieee" else (2 ** (E + M) - 1)
        x = torch.where(u < 0.01, sign | sp, x)
    return x


def encode(codes: torch.Tensor, t: str, k: int) -> torch.Tensor:
    """Codes as mmasim takes them: torch float8 for e4m3 / e5m2; uint8 otherwise (fp6 in bits 5:0, fp4 in
    bits 5:2 for kind::mxf8f6f4; fp4 packed two per byte, the even k in the high nibble, for k = 64)."""
    c8 = codes.to(torch.uint8)
    if t == "e4m3":
        return c8.view(torch.float8_e4m3fn)
    if t == "e5m2":
        return c8.view(torch.float8_e5m2)
    if t == "e2m1" and k == 64:
        return (c8[..., 0::2] << 4) | c8[..., 1::2]
    return c8 << 2 if t == "e2m1" else c8


def inputs(kind, ta, tb, block, st, tiles, seed):
    """codes and values of a (G, T, K), b (G, K, T), scales (G, T, K/block), (G, K/block, T), c (G, T, T)."""
    gen = torch.Generator().manual_seed(seed)
    inst = ARCHS["sm100"].block_scaled[kind]
    K = 2 * inst.k
    ca, cb, sa, sb, cc = [], [], [], [], []
    for i in range(tiles):
        f = i % FAMILIES
        ca.append(element_codes(ta, f, K, block, inst.G, gen))
        cb.append(element_codes(tb, f, K, block, inst.G, gen, negate=False))
        sa.append(scale_codes(st, (T, K // block), gen, f))
        sb.append(scale_codes(st, (T, K // block), gen, f))
        cc.append(c_values(f, gen, st).view(T, T))
    ca, cb, sa, sb = (torch.stack(x) for x in (ca, cb, sa, sb))  # b's and sb's rows are its columns
    return dict(ca=ca, cb=cb, sa=sa, sb=sb, c=torch.stack(cc).float(), K=K, k=inst.k)


def run_mmasim(op, d, kind, ta, tb, st, block):
    """mmasim on every output: (G, T, T, K) vectors; kind::mxf8f6f4 one k = 32 instruction at a time, chained
    through C (its ST-FDPA dpa takes one block per call), the k = 64 kinds in one dpa call over K."""
    G, K, k = d["ca"].shape[0], d["K"], d["k"]
    sdt = torch.float8_e8m0fnu if st == "ue8m0" else torch.float8_e4m3fn
    a = encode(d["ca"], ta, k)[:, :, None, :].expand(G, T, T, -1)
    b = encode(d["cb"], tb, k)[:, None, :, :].expand(G, T, T, -1)
    alpha = d["sa"].to(torch.uint8).view(sdt)[:, :, None, :].expand(G, T, T, -1)
    beta = d["sb"].to(torch.uint8).view(sdt)[:, None, :, :].expand(G, T, T, -1)
    c = d["c"]
    if kind != "mxf8f6f4":
        return op.dpa(a, b, c, alpha, beta)
    for s in range(0, K, k):
        blk = s // block
        c = op.dpa(a[..., s:s + k], b[..., s:s + k], c, alpha[..., blk:blk + 1], beta[..., blk:blk + 1])
    return c


def attnum_args(d, ta, tb, st):
    a = decode(d["ca"], ta).float()  # (G, T, K)
    b = decode(d["cb"], tb).float().transpose(1, 2)  # (G, K, T)
    sa = scale_decode(d["sa"], st).float()  # (G, T, K/block)
    sb = scale_decode(d["sb"], st).float().transpose(1, 2)  # (G, K/block, T)
    return a, b, sa, sb, d["c"]


def mismatch(x, y):
    assert x.dtype == y.dtype == torch.float32 and x.shape == y.shape, (x.shape, y.shape)
    return int((x.view(torch.int32) != y.view(torch.int32)).sum())


def tiles_for(kind):
    per_combo = -(-TARGET // n_combos(kind))
    K = 2 * ARCHS["sm100"].block_scaled[kind].k
    return max(FAMILIES, -(-per_combo // (T * T * K)))


PRODUCTS: dict[tuple[str, str], int] = {}


@pytest.mark.parametrize("arch", ["sm100", "sm120"])
@pytest.mark.parametrize("kind,ta,tb,block,st", combos(), ids=["-".join(map(str, c)) for c in combos()])
def test_matches_mmasim_bit_for_bit(arch, kind, ta, tb, block, st):
    tiles = tiles_for(kind)
    d = inputs(kind, ta, tb, block, st, tiles, seed=zlib.crc32(f"{arch}{kind}{ta}{tb}{block}{st}".encode()))
    want = run_mmasim(oracle(arch, kind, ta, tb, block, st), d, kind, ta, tb, st, block)
    a, b, sa, sb, c = attnum_args(d, ta, tb, st)
    kw = dict(arch=arch, kind=kind, a_format=ta, b_format=tb, block=block, scale_format=st)
    got = ms.matmul_block_scaled(a, b, sa, sb, c, **kw)
    ref = ms.matmul_block_scaled_reference(a, b, sa, sb, c, **kw)
    n = tiles * T * T * d["K"]
    assert n * n_combos(kind) >= TARGET
    for name, x in (("compiled", got), ("reference", ref)):
        bad = mismatch(x, want)
        where = torch.nonzero(x.view(-1).view(torch.int32) != want.reshape(-1).view(torch.int32))[:3, 0].tolist()
        assert bad == 0, (f"{name}: {bad} of {x.numel()} outputs ({n} products) differ from mmasim; first "
                          f"(index, attnum, mmasim): {[(i, x.view(-1)[i].item(), want.reshape(-1)[i].item()) for i in where]}")
    # the families reach what they are for: NaN, inf, zero and fp32-subnormal outputs
    w = want.double()
    assert w.isnan().any() and w.isinf().any() and (w == 0).any() and ((w.abs() < 2.0**-126) & (w != 0)).any()


def test_products_per_arch_and_kind():
    """The counts the bit-for-bit test runs (it asserts its share; this states the sums)."""
    for kind in ("mxf8f6f4", "mxf4", "mxf4nvf4"):
        K = 2 * ARCHS["sm100"].block_scaled[kind].k
        assert tiles_for(kind) * T * T * K * n_combos(kind) >= TARGET


@pytest.mark.parametrize("kind,block,st,K", [("mxf8f6f4", 32, "ue8m0", 96), ("mxf4", 32, "ue8m0", 96),
                                             ("mxf4nvf4", 16, "ue4m3", 48), ("mxf4nvf4", 16, "ue8m0", 144)])
def test_batched_padded_product_equals_mmasim_instructions(kind, block, st, K):
    """A real (2, M, K) @ (K, N) + c with batch broadcast and, for the k = 64 kinds, K not a multiple of k:
    mmasim's own instruction (op(A, B, C, alpha, beta)) on zero-padded tiles, chained through C."""
    gen = torch.Generator().manual_seed(K + block)
    inst = ARCHS["sm120"].block_scaled[kind]
    ta = "e4m3" if kind == "mxf8f6f4" else "e2m1"
    tb = "e2m3" if kind == "mxf8f6f4" else "e2m1"
    M, N, k = 16, 8, inst.k
    ca, cb = finite_codes(ta, (2, M, K), gen), finite_codes(tb, (K, N), gen)
    sa = scale_codes(st, (2, M, K // block), gen, 3)  # blocks far apart
    sb = scale_codes(st, (K // block, N), gen, 0)
    c = torch.randn(2, M, N, generator=gen, dtype=torch.float64)  # float64: rounded once to fp32
    got = ms.matmul_block_scaled(decode(ca, ta), decode(cb, tb), scale_decode(sa, st), scale_decode(sb, st), c,
                                 arch="rtx-blackwell", kind=kind, a_format=ta, b_format=tb, block=block,
                                 scale_format=st)
    assert got.shape == (2, M, N)
    op = oracle("sm120", kind, ta, tb, block, st)
    Kp = -(-K // k) * k
    pad = Kp - K
    sdt = torch.float8_e8m0fnu if st == "ue8m0" else torch.float8_e4m3fn
    cap = torch.cat([ca, torch.zeros(2, M, pad, dtype=torch.int64)], -1)
    cbp = torch.cat([cb, torch.zeros(pad, N, dtype=torch.int64)], 0)
    one = {"ue8m0": 127, "ue4m3": 0x38}[st]
    sap = torch.cat([sa, torch.full((2, M, pad // block), one)], -1).to(torch.uint8).view(sdt)
    sbp = torch.cat([sb, torch.full((pad // block, N), one)], 0).to(torch.uint8).view(sdt)
    for i in range(2):
        acc = c[i].float()
        for s in range(0, Kp, k):
            A = encode(cap[i, :, s:s + k], ta, k)
            B = encode(cbp[s:s + k].T, tb, k).T  # packed along K
            acc = op(A, B, acc, sap[i, :, s // block:(s + k) // block], sbp[s // block:(s + k) // block])
        assert mismatch(got[i], acc) == 0


def test_dtypes_and_aliases_give_the_same_bits():
    """float8 operands (format from the dtype), float8_e8m0fnu / float8_e4m3fn scales, arch aliases, the
    defaults (block, scale format), a scale batch broadcast: the same bits as float32 values."""
    gen = torch.Generator().manual_seed(21)
    ca, cb = finite_codes("e4m3", (3, 8, 64), gen), finite_codes("e5m2", (64, 6), gen)
    a8 = ca.to(torch.uint8).view(torch.float8_e4m3fn)
    b8 = cb.to(torch.uint8).view(torch.float8_e5m2)
    sa, sb = scale_codes("ue8m0", (8, 2), gen, 0), scale_codes("ue8m0", (2, 6), gen, 3)
    x = ms.matmul_block_scaled(a8, b8, sa.to(torch.uint8).view(torch.float8_e8m0fnu),
                               sb.to(torch.uint8).view(torch.float8_e8m0fnu), arch="blackwell", kind="mxf8f6f4")
    y = ms.matmul_block_scaled(decode(ca, "e4m3").float(), decode(cb, "e5m2").float(),
                               scale_decode(sa, "ue8m0").expand(3, 8, 2), scale_decode(sb, "ue8m0"),
                               torch.zeros(6), arch="SM100", kind="mxf8f6f4", a_format="e4m3fn", b_format="e5m2",
                               block=32, scale_format="ue8m0")
    assert x.shape == (3, 8, 6) and mismatch(x, y) == 0
    # NVFP4 by default for mxf4nvf4: block 16, ue4m3 (from the dtype, or the default)
    c4a, c4b = finite_codes("e2m1", (8, 64), gen), finite_codes("e2m1", (64, 6), gen)
    s4a, s4b = scale_codes("ue4m3", (8, 4), gen, 0), scale_codes("ue4m3", (4, 6), gen, 0)
    p = ms.matmul_block_scaled(decode(c4a, "e2m1"), decode(c4b, "e2m1"), s4a.to(torch.uint8).view(torch.float8_e4m3fn),
                               s4b.to(torch.uint8).view(torch.float8_e4m3fn), arch="sm100", kind="mxf4nvf4")
    q = ms.matmul_block_scaled(decode(c4a, "e2m1"), decode(c4b, "e2m1"), scale_decode(s4a, "ue4m3"),
                               scale_decode(s4b, "ue4m3"), arch="sm100", kind="mxf4nvf4")
    assert mismatch(p, q) == 0


@pytest.mark.parametrize("kind", ["mxf8f6f4", "mxf4nvf4"])
def test_exact_products_equal_the_float64_golden(kind):
    """Where nothing is dropped -- every term within F bits of the largest and an fp32 result -- the result is
    the float64 product exactly (a golden that needs no oracle)."""
    gen = torch.Generator().manual_seed(4)
    t = "e4m3" if kind == "mxf8f6f4" else "e2m1"
    block = 32 if kind == "mxf8f6f4" else 16
    K = 128
    a = decode(finite_codes(t, (16, K), gen), t).clamp(-2, 2)
    b = decode(finite_codes(t, (K, 8), gen), t).clamp(-2, 2)
    a = torch.where(a.abs() < 0.5, 0.0, a)  # normal, narrow range: products within a few binades
    b = torch.where(b.abs() < 0.5, 0.0, b)
    sa, sb = torch.ones(16, K // block), torch.ones(K // block, 8)
    got = ms.matmul_block_scaled(a, b, sa, sb, arch="sm100", kind=kind, a_format=t, b_format=t)
    assert torch.equal(got.double(), a @ b)  # small multiples of 2**-8: exact in fp32 and in every group


def test_truncation_goldens():
    """Hand-computed goldens of the two adders' truncation (float64, no oracle).

    ST (mxf8f6f4): c = 1 from the first instruction; the second's 32 products of 2**-26 (2**-6 * 2**-6 under
    the scale 2**-14) each lie below F = 25 bits under e_max = 0 and are dropped: 1.0, not 1 + 2**-21 (an
    fp32 value). GST (mxf4nvf4, block 16, ue8m0): a 16-product group whose products cancel (+1 - 1) under the
    scale 2**20 keeps its scale's exponent 20, so the next group's 1 * 2**-20 falls below 2**(20 - 35): 0.0;
    when the first group's products are all zero it counts as e_zero and the 2**-20 stays."""
    a, b = torch.zeros(1, 64), torch.zeros(64, 1)
    a[0, 0] = b[0, 0] = 1.0
    a[0, 32:] = b[32:, 0] = 2.0**-6
    sa = torch.tensor([[1.0, 2.0**-14]])
    one = ms.matmul_block_scaled(a, b, sa, torch.ones(2, 1), arch="sm100", kind="mxf8f6f4", a_format="e4m3",
                                 b_format="e4m3")
    assert float(one) == 1.0 and float((a.double() * sa.repeat_interleave(32, 1).double()) @ b.double()) == 1 + 2.0**-21
    a, b = torch.zeros(1, 64), torch.zeros(64, 1)
    a[0, :2] = torch.tensor([1.0, -1.0])
    b[:2, 0] = 1.0
    a[0, 16] = b[16, 0] = 1.0
    sa, sb = torch.tensor([[2.0**20, 2.0**-20, 1.0, 1.0]]), torch.ones(4, 1)
    kw = dict(arch="sm120", kind="mxf4nvf4", block=16, scale_format="ue8m0")
    for f in (ms.matmul_block_scaled, ms.matmul_block_scaled_reference):
        assert float(f(a, b, sa, sb, **kw)) == 0.0
        a0 = a.clone()
        a0[0, :2] = 0.0
        assert float(f(a0, b, sa, sb, **kw)) == 2.0**-20


@pytest.mark.parametrize("arch", ["sm100", "sm120"])
def test_e_zero_goldens(arch):
    """e_zero, pinned by hand (float64 goldens; mmasim agrees). With c = 0 the alignment exponent is at least
    e_zero, so a term is kept down to 2**(e_zero - F). ST: 2**-149 - 2**-158 (a product of 2**-9 = e4m3's
    smallest under the same scales 2**-149) keeps its -2**-158 with e_zero = -133 (2**-158 is the last bit
    kept): the sum is below 2**-149 and rounds toward zero to 0.0 (with e_zero = -132 it would be dropped and
    the result 2**-149). GST: 1 * 2**-149 and -1/4 * 2**-172 (a group under scales 2**-172): 2**-174 is the
    last bit kept with e_zero = -139: 0.0 again (2**-149 with -138)."""
    a, b = torch.zeros(1, 32), torch.zeros(32, 1)
    a[0, 0], a[0, 1], b[0, 0], b[1, 0] = 1.0, -(2.0**-9), 1.0, 1.0
    sa, sb = torch.tensor([[2.0**-127]]), torch.tensor([[2.0**-22]])
    kw = dict(arch=arch, kind="mxf8f6f4", a_format="e4m3", b_format="e4m3")
    op = oracle(arch, "mxf8f6f4", "e4m3", "e4m3", 32, "ue8m0")
    want = op(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), torch.zeros(1, 1),
              sa.to(torch.float8_e8m0fnu), sb.to(torch.float8_e8m0fnu))
    assert float(want) == 0.0
    for f in (ms.matmul_block_scaled, ms.matmul_block_scaled_reference):
        assert float(f(a, b, sa, sb, **kw)) == 0.0
        alone = a.clone()
        alone[0, 1] = 0.0
        assert float(f(alone, b, sa, sb, **kw)) == 2.0**-149  # the first product alone
    a, b = torch.zeros(1, 64), torch.zeros(64, 1)
    a[0, 0], b[0, 0], a[0, 16], b[16, 0] = 1.0, 1.0, 0.5, -0.5
    sa, sb = torch.tensor([[2.0**-127, 2.0**-127, 1, 1]]), torch.tensor([[2.0**-22], [2.0**-45], [1], [1]])
    kw = dict(arch=arch, kind="mxf4nvf4", block=16, scale_format="ue8m0")
    op = oracle(arch, "mxf4nvf4", "e2m1", "e2m1", 16, "ue8m0")
    want = op(encode(torch.tensor([[2] + [0] * 15 + [1] + [0] * 47]), "e2m1", 64),  # 1 at k = 0, 0.5 at 16
              encode(torch.tensor([[2] + [0] * 15 + [9] + [0] * 47]), "e2m1", 64).T, torch.zeros(1, 1),  # -0.5
              sa.to(torch.float8_e8m0fnu), sb.to(torch.float8_e8m0fnu))
    assert float(want) == 0.0
    for f in (ms.matmul_block_scaled, ms.matmul_block_scaled_reference):
        assert float(f(a, b, sa, sb, **kw)) == 0.0


def test_threads_do_not_change_the_bits(monkeypatch):
    """The compiled paths split rows (one batch) or batches over threads: no bit changes (a small threshold
    so that small inputs split), and they equal the reference."""
    gen = torch.Generator().manual_seed(9)
    monkeypatch.setattr(ms, "_PRODUCTS_PER_THREAD", 64)
    for kind, t, block, st, batch in (("mxf4nvf4", "e2m1", 16, "ue4m3", ()), ("mxf4", "e2m1", 32, "ue8m0", (3,)),
                                      ("mxf8f6f4", "e3m2", 32, "ue8m0", ()), ("mxf8f6f4", "e4m3", 32, "ue8m0", (2,))):
        M, N, K = 37, 11, 128
        E, Mb, _ = FMT[t]
        a = decode(torch.randint(0, 2 ** (1 + E + Mb), (*batch, M, K), generator=gen), t)  # every code
        b = decode(finite_codes(t, (K, N), gen), t)
        sa = scale_decode(scale_codes(st, (*batch, M, K // block), gen, 3), st)
        sb = scale_decode(scale_codes(st, (K // block, N), gen, 4), st)
        c = torch.randn(*batch, M, N, generator=gen)
        kw = dict(arch="sm100", kind=kind, a_format=t, b_format=t, block=block, scale_format=st)
        p = ms._prepare(a, b, sa, sb, c, "sm100", kind, t, t, block, st)
        one = ms._compiled(p, 1)
        for threads in (2, 3):
            assert mismatch(ms._compiled(p, threads), one) == 0
        assert mismatch(one, ms.matmul_block_scaled_reference(a, b, sa, sb, c, **kw)) == 0


def test_jit_off_runs_the_reference_and_tensors_as_users_hand_them(monkeypatch):
    gen = torch.Generator().manual_seed(2)
    a = decode(finite_codes("e2m3", (64, 5), gen), "e2m3").T.requires_grad_()  # (5, 64), a transposed view
    b = decode(finite_codes("e2m1", (64, 4), gen), "e2m1")
    sa, sb = scale_decode(scale_codes("ue8m0", (5, 2), gen, 1), "ue8m0"), torch.ones(2, 4)
    kw = dict(arch="sm120", kind="mxf8f6f4", a_format="e2m3", b_format="e2m1")
    fast = ms.matmul_block_scaled(a, b, sa, sb, **kw)
    monkeypatch.setenv("ATTNUM_JIT", "0")
    assert mismatch(fast, ms.matmul_block_scaled(a, b, sa, sb, **kw)) == 0
    assert ms.matmul_block_scaled(a[:0], b, sa[:0], sb, **kw).shape == (0, 4)


def _ok():
    return dict(a=torch.ones(4, 64), b=torch.ones(64, 3), a_scale=torch.ones(4, 2), b_scale=torch.ones(2, 3),
                arch="sm100", kind="mxf8f6f4", a_format="e4m3", b_format="e2m1")


@pytest.mark.parametrize("change,words", [
    (dict(arch="sm90"), ["arch='sm90'", "sm100", "sm120"]),
    (dict(arch="sm101"), ["arch='sm101'"]),
    (dict(kind="mxf6"), ["kind='mxf6'", "mxf8f6f4", "mxf4nvf4"]),
    (dict(a_format="e4m4"), ["a_format='e4m4'", "e2m1"]),
    (dict(a_format=None), ["a_format=None", "torch.float32"]),
    (dict(kind="mxf4", a_format="e4m3"), ["a_format='e4m3'", "('e2m1',)"]),
    (dict(block=16), ["block=16", "[32]"]),
    (dict(scale_format="ue4m3"), ["scale_format='ue4m3'", "block=32 with ue8m0"]),
    (dict(scale_format="e5m2"), ["scale_format='e5m2'", "ue8m0"]),
    (dict(kind="mxf4nvf4", a_format="e2m1", block=32, scale_format="ue4m3", a_scale=torch.ones(4, 2)),
     ["scale_format='ue4m3' with block=32", "block=16 with ue4m3"]),
    (dict(a=torch.full((4, 64), 480.0)), ["a holds 480.0", "e4m3fn"]),
    (dict(a=torch.full((4, 64), torch.inf)), ["a holds inf", "e4m3fn"]),
    (dict(b=torch.full((64, 3), 0.75)), ["b holds 0.75", "e2m1fn"]),
    (dict(b=torch.full((64, 3), torch.nan)), ["b holds nan", "e2m1fn"]),
    (dict(a_scale=torch.full((4, 2), 3.0)), ["a_scale holds 3.0", "powers of two"]),
    (dict(a_scale=torch.zeros(4, 2)), ["a_scale holds 0.0", "ue8m0"]),
    (dict(b_scale=torch.full((2, 3), 2.0**128, dtype=torch.float64)), ["b_scale holds", "2**127"]),
    (dict(kind="mxf4nvf4", a_format="e2m1", b_scale=torch.full((4, 3), -1.0), a_scale=torch.ones(4, 4)),
     ["b_scale holds -1.0", "ue4m3", ">= 0"]),
    (dict(kind="mxf4nvf4", a_format="e2m1", b_scale=torch.full((4, 3), 0.3), a_scale=torch.ones(4, 4)),
     ["b_scale holds 0.3", "ue4m3"]),
    (dict(a_scale=torch.ones(4, 3)), ["a_scale.shape=(4, 3)", "(..., 4, 2)"]),
    (dict(b_scale=torch.ones(3, 2)), ["b_scale.shape=(3, 2)", "(..., 2, 3)"]),
    (dict(a=torch.ones(4, 48), a_scale=torch.ones(4, 1), b=torch.ones(48, 3)), ["a.shape=(4, 48)", "block=32"]),
    (dict(b=torch.ones(32, 3)), ["b.shape=(32, 3)", "a.shape=(4, 64)"]),
    (dict(a=torch.ones(4, 64, dtype=torch.int32)), ["a=torch.int32", "floating-point"]),
    (dict(c=torch.zeros(5, 5)), ["c.shape=(5, 5)", "(4, 3)"]),
    (dict(a_scale=torch.ones(2, 4, 2), b_scale=torch.ones(3, 2, 3)), ["a_scale.shape=(2, 4, 2)", "broadcast"]),
])
def test_input_errors_name_the_parameter(change, words):
    kw = {**_ok(), **change}
    args = [kw.pop(n) for n in ("a", "b", "a_scale", "b_scale")]
    for fn in (ms.matmul_block_scaled, ms.matmul_block_scaled_reference):
        with pytest.raises(AttnumInputError) as e:
            fn(*args, **kw)
        msg = str(e.value)
        assert "\n" not in msg and all(w in msg for w in words), msg


def test_the_valid_form_of_the_error_cases_runs():
    """The base of the error cases is itself valid (so each error comes from its one change)."""
    kw = _ok()
    args = [kw.pop(n) for n in ("a", "b", "a_scale", "b_scale")]
    assert ms.matmul_block_scaled(*args, **kw).shape == (4, 3)
    assert torch.equal(ms.matmul_block_scaled(*args, **kw), torch.full((4, 3), 64.0))
