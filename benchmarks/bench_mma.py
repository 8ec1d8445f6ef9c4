"""attnum.mma.matmul against mmasim's own operation on the same product (issue 29: at least 50x).

    python benchmarks/bench_mma.py [--rows 256] [--reps 5] [--full] [--case all|wgmma|block-scaled]

(1024 x 64) @ (64 x 1024) bf16 on sm90 (Hopper wgmma, fp32 accumulator), c = 0. attnum: the minimum over
``--reps`` calls (after one warm-up that compiles). mmasim 2.1.1: ``WGMMA("Hopper", "m64n256k16.f32.bf16.bf16")``
called once on (rows x 64) @ (64 x 1024) (its fastest form: one call expands every output's K vector and
runs the groups of 16 in order, the same arithmetic as 4 chained k16 instructions), at torch's default
thread count and at one thread; its cost is linear in the rows (it materialises (rows, 1024, 64) float64
tensors), so the slice's time is scaled to 1024 rows, and the output says so (``--full``: all 1024 rows,
several GB of memory). The ratio uses the faster of the two mmasim timings. The slice's bits are compared
(0 mismatches required). Prints the CPU model and the load average (the ratio is of two timings in this
run, but a loaded machine slows the two unequally).

Block-scaled (``--case block-scaled``): (1024 x 128) @ (128 x 1024) on sm100 with
``attnum.mma.matmul_block_scaled``, two products: MXFP8 (kind::mxf8f6f4, e4m3 x e4m3, block 32,
ue8m0 scales; mmasim ``TCGen05MMABlockScale("Blackwell", "m128n256k32.kind::mxf8f6f4.block32.f32.e4m3.e4m3.ue8m0")``
chained over the 4 k32 instructions through C, as its ST-FDPA takes one block per call) and NVFP4
(kind::mxf4nvf4, e2m1, block 16, ue4m3; ``"m128n256k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3"`` called
once over K = 128, packed fp4). Random elements (every finite code) and scales (2**-8 .. 2**8 / ue4m3
0.0625 .. 2), c = 0; the same row slice, scaling and bit comparison as above.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from bench_core import cpu_model

from attnum import mma


def _time_mmasim(call, rows: int) -> tuple[dict[int, float], torch.Tensor]:
    """mmasim's call on the row slice at torch's default thread count and at one thread: (timings, result)."""
    timings = {}
    threads = torch.get_num_threads()
    for n in dict.fromkeys((threads, 1)):
        torch.set_num_threads(n)
        t0 = time.perf_counter()
        want = call()
        timings[n] = time.perf_counter() - t0
    torch.set_num_threads(threads)
    return timings, want


def _time_attnum(call, reps: int) -> tuple[float, torch.Tensor]:
    """attnum's call: the minimum wall time over ``reps`` calls (compiled beforehand), and its result."""
    best, got = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        got = call()
        best = min(best, time.perf_counter() - t0)
    return best, got


def _report(name: str, t_attnum: float, timings: dict[int, float], rows: int, M: int, N: int, bad: int, reps: int):
    scale = M / rows
    t_mmasim = min(timings.values()) * scale
    for n, t in timings.items():
        how = "all rows" if rows == M else f"{rows}-row slice, x{scale:g} to {M} rows"
        print(f"mmasim {n} thread(s): {t:.3f} s ({how}) -> {t * scale:.2f} s")
    print(f"{name}: {t_attnum:.3f} s (min of {reps}; numba, {torch.get_num_threads()} thread(s))")
    print(f"mismatches on the {rows} rows mmasim ran: {bad} of {rows * N}")
    ratio = t_mmasim / t_attnum
    print(f"ratio mmasim / attnum = {ratio:.0f}x (target >= 50x): {'met' if ratio >= 50 and bad == 0 else 'NOT met'}")


def block_scaled(args) -> None:
    """The two block-scaled products (see the module docstring)."""
    from mmasim.nv_ptx import TCGen05MMABlockScale

    from attnum import mma as mma_scaled

    M, K, N = 1024, 128, 1024
    rows = M if args.full else args.rows
    gen = torch.Generator().manual_seed(1)
    c = torch.zeros(M, N)

    def e4m3(shape):
        x = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
        return torch.where((x & 0x7F) == 0x7F, x - 1, x).view(torch.float8_e4m3fn)  # every finite code

    a, b = e4m3((M, K)), e4m3((K, N))
    sa = torch.randint(119, 136, (M, K // 32), generator=gen, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    sb = torch.randint(119, 136, (K // 32, N), generator=gen, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    print(f"product: ({M} x {K}) @ ({K} x {N}) MXFP8 e4m3 x e4m3, block 32 ue8m0, sm100 "
          "(tcgen05.mma kind::mxf8f6f4, ST-FDPA: k = L = 32, F = 25, fp32 RZ)")
    kw = dict(arch="sm100", kind="mxf8f6f4")
    mma_scaled.matmul_block_scaled(a[:2], b, sa[:2], sb, **kw)  # compile (cached after the first run)
    t_attnum, got = _time_attnum(lambda: mma_scaled.matmul_block_scaled(a, b, sa, sb, c, **kw), args.reps)
    op = TCGen05MMABlockScale("Blackwell", "m128n256k32.kind::mxf8f6f4.block32.f32.e4m3.e4m3.ue8m0")

    def chained():
        acc = c[:rows]
        for s in range(0, K, 32):
            acc = op(a[:rows, s:s + 32], b[s:s + 32], acc, sa[:rows, s // 32:s // 32 + 1], sb[s // 32:s // 32 + 1])
        return acc

    timings, want = _time_mmasim(chained, rows)
    bad = int((got[:rows].view(torch.int32) != want.view(torch.int32)).sum())
    _report("attnum.mma.matmul_block_scaled (MXFP8)", t_attnum, timings, rows, M, N, bad, args.reps)

    fp4 = torch.tensor([0.0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    ca = torch.randint(0, 16, (M, K), generator=gen)
    cb = torch.randint(0, 16, (K, N), generator=gen)
    s4a = torch.randint(0x18, 0x41, (M, K // 16), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn)
    s4b = torch.randint(0x18, 0x41, (K // 16, N), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn)
    print(f"product: ({M} x {K}) @ ({K} x {N}) NVFP4 e2m1, block 16 ue4m3, sm100 "
          "(tcgen05.mma kind::mxf4nvf4, GST-FDPA: k = L = 64, G = 16, F = 35, fp32 RZ)")
    kw = dict(arch="sm100", kind="mxf4nvf4")
    mma_scaled.matmul_block_scaled(fp4[ca[:2]], fp4[cb], s4a[:2], s4b, **kw)
    t_attnum, got = _time_attnum(lambda: mma_scaled.matmul_block_scaled(fp4[ca], fp4[cb], s4a, s4b, c, **kw),
                                 args.reps)
    op4 = TCGen05MMABlockScale("Blackwell", "m128n256k64.kind::mxf4nvf4.block16.f32.e2m1.e2m1.ue4m3")
    pa = ((ca[:rows, 0::2] << 4) | ca[:rows, 1::2]).to(torch.uint8)  # packed along K, the even k high
    pb = ((cb[0::2] << 4) | cb[1::2]).to(torch.uint8)
    timings, want = _time_mmasim(lambda: op4(pa, pb, c[:rows], s4a[:rows], s4b), rows)
    bad = int((got[:rows].view(torch.int32) != want.view(torch.int32)).sum())
    _report("attnum.mma.matmul_block_scaled (NVFP4)", t_attnum, timings, rows, M, N, bad, args.reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=256, help="rows of A that mmasim runs (scaled to 1024)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--full", action="store_true", help="mmasim on all 1024 rows (no scaling)")
    ap.add_argument("--case", choices=("all", "wgmma", "block-scaled"), default="all")
    args = ap.parse_args()
    print(f"CPU: {cpu_model()}; load average before: {os.getloadavg()[0]:.1f}")
    if args.case in ("all", "wgmma"):
        wgmma(args)
    if args.case in ("all", "block-scaled"):
        block_scaled(args)


def wgmma(args) -> None:
    from mmasim.nv_ptx import WGMMA

    M, K, N = 1024, 64, 1024
    rows = M if args.full else args.rows
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=gen).bfloat16()
    b = torch.randn(K, N, generator=gen).bfloat16()
    c = torch.zeros(M, N)
    print(f"product: ({M} x {K}) @ ({K} x {N}) bf16, sm90 (wgmma m64nNk16, L = 16, F = 25, fp32 RZ)")

    mma.matmul(a[:2], b, arch="sm90")  # compile (cached after the first run)
    t_attnum, got = _time_attnum(lambda: mma.matmul(a, b, c, arch="sm90"), args.reps)
    op = WGMMA("Hopper", "m64n256k16.f32.bf16.bf16")
    timings, want = _time_mmasim(lambda: op(a[:rows], b, c[:rows]), rows)
    bad = int((got[:rows].view(torch.int32) != want.view(torch.int32)).sum())
    _report("attnum.mma.matmul", t_attnum, timings, rows, M, N, bad, args.reps)


if __name__ == "__main__":
    main()
