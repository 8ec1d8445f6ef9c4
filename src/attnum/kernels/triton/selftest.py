"""The faithful interpreter's self-test: tiny Triton kernels whose interpreted results must equal
:mod:`attnum.kernels.triton.model` bit for bit.

Each check runs one kernel of :mod:`attnum.kernels.triton.selftest_kernels` under
:func:`attnum.kernels.triton.faithful.faithful` and computes the same result from the kernel's inputs
with the model's functions (torch, ``round_to``). It checks that the hooks are where the installed
Triton calls them: a Triton whose interpreter moved an operation elsewhere fails here, and attnum's
Triton targets then refuse to judge (``unsupported``) rather than report the raw interpreter's numbers.
``run(arch)`` is cached per process and architecture; ``python -m attnum.kernels.triton.selftest [ARCH]``
prints it. The tensor-core checks (:func:`_tensor_core_checks`) also hold the model before the
tensor-core work (exact products, one round-to-nearest per instruction) to differ from the interpreted
result somewhere: a hook that silently fell back to it would fail them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from attnum.kernels.triton import model
from attnum.kernels.triton import tensor_core as tc


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


def _bits_equal(got: torch.Tensor, want: torch.Tensor) -> tuple[bool, str]:
    got, want = got.to(want.dtype), want
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    if bool(same.all()):
        return True, ""
    i = int((~same).flatten().nonzero()[0])
    return False, f"{int((~same).sum())} of {same.numel()} differ; first: got {got.flatten()[i].item()!r}, " \
                  f"model {want.flatten()[i].item()!r}"


def _inputs(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32) * scale


def _checks(arch: str = tc.DEFAULT_ARCH):
    from attnum.kernels.triton import selftest_kernels as K

    n = 32
    q = _inputs(1, n).to(torch.bfloat16)
    k = _inputs(2, n).to(torch.bfloat16)
    prod, tot = torch.empty(n, dtype=torch.bfloat16), torch.empty(1, dtype=torch.float32)
    K.mul_sum[(1,)](q, k, prod, tot, N=n)
    want_p = model.elementwise(torch.mul, q.float(), k.float(), "bf16")
    yield "bf16 q * k", prod.float(), want_p
    yield "bf16 tl.sum(q * k)", tot, model.tree_sum(want_p, 0, "bf16").reshape(1)

    x = torch.cat([torch.tensor([1.2955, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -(1.0 + 2.0 ** -8), 3.0e38]),
                   _inputs(3, n - 5)]).float()
    y = torch.empty(n, dtype=torch.bfloat16)
    K.store_cast[(1,)](x, y, N=n)
    yield "fp32 -> bf16 store", y.float(), model.cast(x, "bf16").float()

    a, b = _inputs(4, 16, 16), _inputs(5, 16, 16)
    a[0, :3] = torch.tensor([1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -12, -(1.0 + 2.0 ** -11)])  # tf32 ties
    one = torch.ones(16, 16, dtype=torch.float64)
    for p in model.PRECISIONS:
        c = torch.empty(16, 16, dtype=torch.float32)
        K.dot[(1,)](a, b, c, M=16, K=16, N=16, PRECISION=p)
        yield f"fp32 tl.dot {p}", c, model.dot(a, b, one, precision=p, arch=arch).float()

    for dt in (torch.float8_e4m3fn, torch.bfloat16):
        if dt == torch.float8_e4m3fn and arch == "sm80":
            continue  # no e4m3 tl.dot below sm89 (the tensor-core checks hold the refusal)
        a8, b8 = _inputs(6, 64, 32, scale=4.0).to(dt), _inputs(7, 32, 16, scale=4.0).to(dt)
        c = torch.empty(64, 16, dtype=torch.float32)
        K.dot_lowp[(1,)](a8, b8, c, M=64, K=32, N=16)
        zero = torch.zeros(64, 16, dtype=torch.float64)
        bits = 8 if dt == torch.float8_e4m3fn else 16
        yield f"{str(dt)[6:]} tl.dot", c, model.dot(a8.double(), b8.double(), zero, operand_bits=bits, arch=arch,
                                                    dtypes=(dt, dt)).float()

    # int8 x int8 -> int32 (the extremes included: 64 * 127 * 128 = 1040384 < 2**31) and an fp16
    # accumulator (out_dtype=fp16), SageAttention's two dots; fp32 -> int8 with the half-away trick.
    g = torch.Generator().manual_seed(10)
    a8 = torch.randint(-128, 128, (16, 64), generator=g, dtype=torch.int8)
    b8 = torch.randint(-128, 128, (64, 16), generator=g, dtype=torch.int8)
    a8[0], b8[:, 0] = 127, -128
    c = torch.empty(16, 16, dtype=torch.int32)
    K.dot_int8[(1,)](a8, b8, c, M=16, K=64, N=16)
    yield "int8 tl.dot -> int32", c.double(), model.dot_int(a8, b8, torch.zeros(16, 16, dtype=torch.int64)).double()
    a16, b16 = _inputs(11, 16, 64).half(), _inputs(12, 64, 16, scale=8.0).half()
    c = torch.empty(16, 16, dtype=torch.float16)
    K.dot_fp16_acc[(1,)](a16, b16, c, M=16, K=64, N=16)
    zero = torch.zeros(16, 16, dtype=torch.float64)
    yield "fp16 tl.dot out_dtype=fp16", c.double(), model.dot(a16.double(), b16.double(), zero, operand_bits=16,
                                                              out_fmt="fp16", arch=arch,
                                                              dtypes=(torch.float16, torch.float16))
    x = torch.cat([torch.tensor([126.5, -126.5, 0.49999997, -0.5, 127.0, -127.4]), _inputs(13, n - 6, scale=60.0)])
    y = torch.empty(n, dtype=torch.int8)
    K.to_int8[(1,)](x, y, N=n)
    half = torch.where(x >= 0, 0.5, -0.5)
    yield "fp32 -> int8 (x + 0.5 sign x)", y.double(), model.to_int(model.cast(x.double() + half, "fp32"), 8).double()

    x = _inputs(8, n, scale=10.0)
    y = torch.empty(n, dtype=torch.float32)
    K.exp[(1,)](x, y, N=n)
    yield "fp32 tl.exp", y, model.exp(x).float()

    x = _inputs(9, n).to(torch.bfloat16)
    y = torch.empty(1, dtype=torch.bfloat16)
    K.max_bf16[(1,)](x, y, N=n)
    yield "bf16 tl.max", y.float(), x.float().max().reshape(1)

    yield from _mul_add_checks(K, n)
    yield from _dot_add_checks(K, arch)
    yield from _tensor_core_checks(K, arch)


def _tensor_core_checks(K, arch: str):
    """Dots on which the tensor-core model and the exact-products model differ: (label, got, want, old).

    1. bf16 (64, 64) @ (64, 16) onto a large fp32 accumulator with products spread over 2**20: the
       alignment truncates the small products and the result rounds toward zero.
    2. fp8 e4m3 (64, 256) @ (256, 16), positive: on sm90 the default (never promote) sums all 256
       products in wgmma's 13-bit accumulator, and ``max_num_imprecise_acc=64`` promotes every 64;
       on sm80 the dot is refused (no e4m3 tl.dot below sm89)."""
    g = torch.Generator().manual_seed(21)
    a = (torch.randn(64, 64, generator=g) * torch.exp2(torch.randint(-10, 10, (64, 64), generator=g).float()))
    b = torch.randn(64, 16, generator=g)
    a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    acc = _inputs(22, 64, 16, scale=2.0 ** 12)
    y = torch.empty(64, 16, dtype=torch.float32)
    K.scaled_acc_dot[(1,)](a, b, acc, torch.ones(64), y, M=64, K=64, N=16)
    bf = (torch.bfloat16, torch.bfloat16)
    new = model.dot(a.double(), b.double(), acc.double(), operand_bits=16, arch=arch, dtypes=bf)
    old = model.dot(a.double(), b.double(), acc.double(), operand_bits=16)
    yield "bf16 tl.dot onto a large acc (tensor-core rounding)", y, new.float(), old.float()

    a8 = (_inputs(23, 64, 256).abs() + 0.25).to(torch.float8_e4m3fn)
    b8 = (_inputs(24, 256, 16).abs() + 0.25).to(torch.float8_e4m3fn)
    zero = torch.zeros(64, 16, dtype=torch.float64)
    f8 = (torch.float8_e4m3fn, torch.float8_e4m3fn)
    old = model.dot(a8.double(), b8.double(), zero, operand_bits=8).float()
    for mx in (0, 64):
        c = torch.empty(64, 16, dtype=torch.float32)
        label = f"e4m3 tl.dot K=256 max_num_imprecise_acc={mx or 'default'}"
        if arch == "sm80":
            try:
                K.dot_fp8_imprecise[(1,)](a8, b8, c, M=64, K=256, N=16, MAX=mx)
            except Exception as exc:  # noqa: BLE001 - the refusal is the expected result
                refused = _refusal(exc)
                yield label + " refused on sm80", torch.tensor([float(refused)]), torch.tensor([1.0]), None
                continue
            yield label + " refused on sm80", torch.tensor([0.0]), torch.tensor([1.0]), None
            continue
        K.dot_fp8_imprecise[(1,)](a8, b8, c, M=64, K=256, N=16, MAX=mx)
        new = model.dot(a8.double(), b8.double(), zero, operand_bits=8, arch=arch, dtypes=f8,
                        max_imprecise=mx or None).float()
        yield label, c, new, old


def _refusal(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, NotImplementedError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def dot_add_inputs() -> tuple[torch.Tensor, ...]:
    """fp16 a (16, 32), b (32, 16); fp32 c (16, 16), s (16): c * s[:, None] + a @ b, with c * s large
    enough against a @ b that accumulating onto it per k-step and adding it once differ."""
    a, b = _inputs(17, 16, 32).half(), _inputs(18, 32, 16).half()
    return a, b, _inputs(19, 16, 16, scale=64.0), _inputs(20, 16).abs() + 0.5


def _dot_add_checks(K, arch: str = tc.DEFAULT_ARCH):
    """``acc * s + tl.dot(a, b)``: Triton's combine pass makes the rescaled acc (its product rounded to
    fp32, not fused: the add is gone) the dot's accumulator."""
    a, b, acc, s = dot_add_inputs()
    y = torch.empty(16, 16, dtype=torch.float32)
    K.scaled_acc_dot[(1,)](a, b, acc, s, y, M=16, K=32, N=16)
    start = model.cast(acc.double() * s.double()[:, None], "fp32")
    yield "fp32 acc * s + tl.dot(a, b) (combined)", y, model.dot(a.double(), b.double(), start, operand_bits=16,
                                                                  arch=arch,
                                                                  dtypes=(torch.float16, torch.float16)).float()


def mul_add_inputs(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 a, b, c with c close to -a*b, where one rounding (fma) and two differ most often."""
    a, b = _inputs(14, n), _inputs(15, n)
    c = (-(a.double() * b.double()) * (1 + _inputs(16, n).double() * 2.0 ** -12)).float()
    return a, b, c


def _mul_add_checks(K, n: int):
    """fp32 a * b + c, c - a * b and a * b, launched with FP fusion on and off (``enable_fp_fusion=``)."""
    a, b, c = mul_add_inputs(n)
    for fused in (True, False):
        y, z, w = (torch.empty(n, dtype=torch.float32) for _ in range(3))
        K.mul_add[(1,)](a, b, c, y, z, w, N=n, enable_fp_fusion=fused)
        tag = "fp-fusion" if fused else "no fp-fusion"
        yield f"fp32 a * b + c ({tag})", y, model.mul_add(a, b, c, fused=fused).float()
        yield f"fp32 c - a * b ({tag})", z, model.mul_add(-a, b, c, fused=fused).float()
        yield f"fp32 a * b ({tag})", w, model.cast(a.double() * b.double(), "fp32").float()


@functools.cache
def run(arch: str = tc.DEFAULT_ARCH) -> tuple[Check, ...]:
    """Every check under ``arch``'s tensor cores (the kernels need TRITON_INTERPRET=1 before triton is
    imported)."""
    from attnum.kernels.triton import faithful as triton_faithful

    out = []
    try:
        with triton_faithful.faithful(arch=arch):
            for label, got, want, *old in _checks(arch):
                ok, why = _bits_equal(got, want)
                if ok and old and old[0] is not None and _bits_equal(old[0], want)[0]:
                    ok, why = False, "the exact-products model gives the same bits: the case shows nothing"
                out.append(Check(name=label, ok=ok, detail=why))
    except Exception as exc:  # noqa: BLE001 - an interpreter the hooks do not fit fails the self-test
        out.append(Check(name="self-test", ok=False, detail=f"{type(exc).__name__}: {exc}".splitlines()[0][:300]))
    return tuple(out)


def failure(arch: str = tc.DEFAULT_ARCH) -> str:
    """'' when the self-test passes under ``arch``, else one line saying what failed."""
    bad = [c for c in run(arch) if not c.ok]
    return "; ".join(f"{c.name}: {c.detail}" for c in bad)


if __name__ == "__main__":
    import os
    import sys

    os.environ["TRITON_INTERPRET"] = "1"
    for c in run(sys.argv[1] if len(sys.argv) > 1 else tc.DEFAULT_ARCH):
        print(f"{'ok  ' if c.ok else 'FAIL'} {c.name}" + (f"  ({c.detail})" if c.detail else ""))
