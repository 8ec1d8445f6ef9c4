"""Which tensor core is this? Name an :mod:`attnum.numerics.mma.dense` architecture from a matmul callable alone.

``identify_mma(matmul_fn)`` calls ``matmul_fn(a, b, c)`` -- a (M, K) @ b (K, N) + c (M, N) float32, in the
operand dtype, returning float32 -- on crafted tiles and replays each architecture's model
(:func:`attnum.numerics.mma.dense.matmul`) on the same tiles. The tiles make the models differ (Xie et al.,
MMA-Sim, arXiv 2511.10909; Khattak & Mikaitis, arXiv 2512.07004): operands spread over many binades, so
that each group's alignment to its largest exponent and truncation to F fraction bits drop different
bits; one large product per row at a moving position, so that the group size L (which products are
aligned together) shows; accumulators larger and smaller than the products (the c alignment); and exact
cancellations (the rounding direction of what is left). Architectures whose models agree on every tile
form one class (the crafted set cannot tell them apart: the same arithmetic for these operands); the
answer is the class whose outputs equal the target's in every bit, or none.
"""

from __future__ import annotations

import torch

from attnum.errors import bad_value
from attnum.numerics.mma import dense as mma
from attnum.numerics.mma.arch import ARCHS

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}
M, N, K = 16, 8, 32  # K: a whole number of every architecture's instruction steps (4 .. 32)


def crafted_tiles(dtype: str, tiles: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``tiles`` (a (M, K), b (K, N), c (M, N) float32) operand sets (module doc)."""
    dt = DTYPES[dtype]
    g = torch.Generator().manual_seed(seed)
    lo, hi = (-6, 6) if dtype == "fp16" else (-20, 20)
    out = []
    for t in range(tiles):
        def wide(*shape):
            mant = 1 + torch.rand(*shape, generator=g, dtype=torch.float64)
            sign = torch.where(torch.rand(*shape, generator=g) < 0.5, -1.0, 1.0).double()
            exp = torch.randint(lo, hi + 1, shape, generator=g).double()
            return sign * mant * 2.0 ** exp

        a, b = wide(M, K), wide(K, N)
        if t % 3 == 1:  # one dominant product per row, at a position that moves with the row
            pos = (torch.arange(M) * 5 + t) % K
            a[torch.arange(M), pos] = 2.0 ** (hi - 1)
        if t % 3 == 2:  # exact cancellation inside a row: the rest decides the result
            a[:, 1] = -a[:, 0]
            b[1] = b[0]
        c_exp = torch.randint(lo - 4, 2 * hi + 4, (M, N), generator=g).double()
        c = torch.where(torch.rand(M, N, generator=g) < 0.2, 0.0, (torch.rand(M, N, generator=g).double() - 0.5)
                        * 2.0 ** c_exp)
        out.append((a.to(dt), b.to(dt), c.float()))
    return out


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


def check_matmul(matmul_fn, *, dtype: str = "fp16", param: str = "--matmul") -> None:
    """One call on one crafted tile, before any other work: a callable that cannot take ``(a, b, c)`` or
    does not return a float32 (M, N) tensor is an AttnumInputError naming ``param`` now, not after the
    fingerprint it would end."""
    import inspect

    from attnum.errors import AttnumInputError

    if not callable(matmul_fn):
        raise AttnumInputError(f"{param}: {type(matmul_fn).__name__} is not callable; expected a function "
                               "(a, b, c) -> a @ b + c in float32")
    try:
        inspect.signature(matmul_fn).bind(None, None, None)
    except TypeError as err:
        raise AttnumInputError(f"{param}: its signature {inspect.signature(matmul_fn)} cannot take (a, b, c): "
                               f"{err}") from None
    except ValueError:
        pass  # a builtin without a signature: the trial call below tells
    a, b, c = crafted_tiles(dtype, 1, 0)[0]
    try:
        y = matmul_fn(a, b, c)
    except Exception as err:  # noqa: BLE001 - whatever the user's function raises is a usage error
        first = (str(err).strip().splitlines() or [""])[0]
        raise AttnumInputError(f"{param}: calling it on a ({M}, {K}) @ ({K}, {N}) + ({M}, {N}) tile raised "
                               f"{type(err).__name__}: {first}") from None
    if not isinstance(y, torch.Tensor) or y.shape != (M, N) or y.dtype != torch.float32:
        got = f"{y.dtype} {tuple(y.shape)} tensor" if isinstance(y, torch.Tensor) else type(y).__name__
        raise AttnumInputError(f"{param}: on a ({M}, {K}) @ ({K}, {N}) + ({M}, {N}) tile it returned a {got}; "
                               f"expected a float32 ({M}, {N}) tensor")


def identify_mma(matmul_fn, *, dtype: str = "fp16", tiles: int = 24, seed: int = 0) -> dict:
    """{identified, matching, classes, calls, dtype}: ``identified`` names the architecture(s) whose model
    reproduces ``matmul_fn`` bit for bit on every crafted tile ("a|b" when the tiles cannot tell them
    apart), or is "not identified" (``matching`` then is empty)."""
    if dtype not in DTYPES:
        raise bad_value("dtype", dtype, f"one of {tuple(DTYPES)}")
    kind = {"fp16": "fp16", "bf16": "bf16", "tf32": "tf32"}[dtype]
    archs = [name for name, arch in ARCHS.items() if kind in arch.instructions]
    data = crafted_tiles(dtype, tiles, seed)
    models = {name: [_bits(mma.matmul(a, b, c, arch=name)) for a, b, c in data] for name in archs}
    got, calls = [], 0
    for a, b, c in data:
        y = matmul_fn(a, b, c)
        calls += 1
        if not isinstance(y, torch.Tensor) or y.shape != (M, N) or y.dtype != torch.float32:
            raise bad_value("matmul_fn output", getattr(y, "shape", type(y).__name__), f"a float32 ({M}, {N}) tensor")
        got.append(_bits(y))
    classes: list[list[str]] = []
    for name in archs:
        for cls in classes:
            if all(torch.equal(x, y) for x, y in zip(models[name], models[cls[0]], strict=True)):
                cls.append(name)
                break
        else:
            classes.append([name])
    matching = [cls for cls in classes if all(torch.equal(x, y) for x, y in zip(models[cls[0]], got, strict=True))]
    flat = [n for cls in matching for n in cls]
    return {"identified": "|".join(flat) if flat else "not identified", "matching": flat,
            "classes": ["|".join(c) for c in classes], "calls": calls, "dtype": dtype}
