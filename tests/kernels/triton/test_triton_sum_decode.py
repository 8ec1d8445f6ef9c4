"""attnum.kernels.triton.sum_decode: the element-wise Triton decode arithmetic (LightLLM's lineage).

- ``sum_decode`` and its plain reference (one numpy program per head, as the kernels are written) give
  the same bits, over formats, head dims that are and are not powers of 2, tiles, splits (empty ones too)
  and both FP-fusion settings;
- against float64 attention, within a bound derived from the formats (below);
- the real kernels (SGLang's and vLLM's, interpreted under the faithful model) equal it bit for bit
  (a child process: tests/_sum_decode_kernel_check.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import _paths
import pytest
import torch
from _wheel_helpers import fetched_or_skip

from attnum import golden_attention
from attnum.errors import AttnumInputError
from attnum.kernels.triton.sum_decode import SumDecode, sum_decode, sum_decode_reference

HERE = _paths.TESTS  # the helper scripts
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
U = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}


def _inputs(S, H, d, dv, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, 1, d, generator=g, dtype=dtype)
    k = torch.randn(1, H, S, d, generator=g, dtype=dtype) * 2
    v = torch.randn(1, H, S, dv, generator=g, dtype=dtype) + 0.25
    return q, k, v


@pytest.mark.parametrize("fmt,S,d,dv,block_k,bounds,fused", [
    ("bf16", 300, 64, 64, 64, ((0, 128), (128, 256), (256, 300)), True),
    ("bf16", 97, 48, 80, 16, ((0, 97),), False),
    ("fp16", 200, 80, 80, 32, ((0, 67), (67, 134), (134, 200)), True),
    ("fp16", 64, 16, 16, 128, ((0, 32), (32, 64), (96, 64)), False),  # an empty last split, skipped
    ("fp32", 333, 32, 48, 64, ((0, 111), (111, 222), (222, 333)), True),
    ("fp32", 50, 100, 100, 8, ((0, 50),), False),
])
def test_fast_path_and_reference_give_the_same_bits(fmt, S, d, dv, block_k, bounds, fused):
    q, k, v = (t.to(DT[fmt]) for t in _inputs(S, 3, d, dv, seed=S))
    fast = sum_decode(q, k, v, bounds=bounds, block_k=block_k, fused=fused)
    ref = sum_decode_reference(q, k, v, bounds=bounds, block_k=block_k, fused=fused)
    assert fast.dtype == q.dtype and fast.shape == (1, 3, 1, dv)
    assert torch.equal(fast.view(-1).double(), ref.view(-1).double())


def test_fp_fusion_changes_bits_and_every_split_cut_is_a_different_arithmetic():
    q, k, v = (t.float() for t in _inputs(400, 4, 64, 64, seed=1))
    one = sum_decode(q, k, v, bounds=((0, 400),), block_k=64)
    unfused = sum_decode(q, k, v, bounds=((0, 400),), block_k=64, fused=False)
    three = sum_decode(q, k, v, bounds=((0, 134), (134, 268), (268, 400)), block_k=64)
    assert not torch.equal(one, unfused) and not torch.equal(one, three)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32"])
def test_against_float64_within_the_derived_bound(fmt):
    """Float64 inputs (q, k in {-1, 0, 1}, V random) against float64 attention, per element. Every score
    product and tree or pairwise sum is then exact in every format (integers of at most d = 64) and the
    scale 1 / 8 is exact, so what is left is the fp32 arithmetic after the scores and the last
    rounding: exp (correctly rounded), the sequential P V and P sums and the online rescales and merge
    (at most 2 (S + 8) u32 max|V| as sequential-sum bounds), and half an ulp of the output (u |o|).
    For the 16-bit outputs the last rounding dominates, so the bound is near the error (within 4x)."""
    S, H, d = 512, 4, 64
    g = torch.Generator().manual_seed(5)
    q64 = torch.randint(-1, 2, (1, H, 1, d), generator=g).double()
    k64 = torch.randint(-1, 2, (1, H, S, d), generator=g).double()
    v64 = torch.randn(1, H, S, d, generator=g, dtype=torch.float64) + 0.25
    q, k, v = (t.to(DT[fmt]) for t in (q64, k64, v64))
    out = sum_decode(q, k, v, bounds=((0, 192), (192, 384), (384, 512)), block_k=64).double()
    gold = golden_attention(q.double(), k.double(), v.double())
    u32 = 2.0**-24
    bound = 2 * (S + 8) * u32 * float(v.double().abs().max()) + U[fmt] * gold.abs()
    err = (out - gold).abs()
    assert float(err.max()) > 0 and bool((err <= bound).all()), (float(err.max()), float(bound.max()))
    if fmt != "fp32":
        assert float((bound / err.clamp_min(1e-300)).min()) < 4, "the bound is far from every error"


def test_the_numpy_fma_is_fma_round():
    """The fused update in numpy equals attnum.numerics.fma.fma_round on fp32 values: random ones over
    many binades, exact cancellations, ties of the fp32 grid, signed zeros, infinities and NaN."""
    from attnum.kernels.triton.sum_decode import _mul_add
    from attnum.numerics.fma import fma_round

    g = torch.Generator().manual_seed(3)
    n = 200_000
    a, b, c = (torch.randn(n, generator=g, dtype=torch.float64) * 2.0 ** torch.randint(-30, 30, (n,), generator=g)
               for _ in range(3))
    a, b, c = a.float().double(), b.float().double(), c.float().double()
    c[: n // 4] = -(a[: n // 4] * b[: n // 4]).float().double()  # near-cancellation
    a[:8] = torch.tensor([0.0, -0.0, float("inf"), 1.0, float("nan"), 1.0 + 2**-23, 3.0, -2.0], dtype=torch.float64)
    b[:8] = torch.tensor([5.0, 2.0, 0.0, float("inf"), 1.0, 1.0 - 2**-23, 2**-24, -0.0], dtype=torch.float64)
    want = fma_round(a, b, c, "fp32").float()
    got = torch.from_numpy(_mul_add(a.float().numpy(), b.float().numpy(), c.float().numpy(), True))
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    assert bool(same.all()), int((~same).sum())


def test_bad_input_names_the_parameter():
    q, k, v = (t.float() for t in _inputs(10, 1, 8, 8, seed=0))
    with pytest.raises(AttnumInputError, match="bounds"):
        sum_decode(q, k, v, bounds=((0, 11),))
    with pytest.raises(AttnumInputError, match="block_k"):
        sum_decode(q, k, v, bounds=((0, 10),), block_k=0)
    with pytest.raises(AttnumInputError, match="q"):
        sum_decode(q.expand(1, 1, 2, 8), k, v, bounds=((0, 10),))
    with pytest.raises(AttnumInputError, match="bounds"):
        sum_decode(q, k, v, bounds=((5, 5),))


@pytest.mark.parametrize("name, call", [
    ("k/v", lambda q, k, v: sum_decode(q[..., :0], k[..., :0], v, bounds=((0, 10),))),  # d = 0 (once 1 / 0)
    ("k/v", lambda q, k, v: sum_decode(q, k, v[..., :0], bounds=((0, 10),))),  # dv = 0
    ("bounds", lambda q, k, v: sum_decode(q, k, v, bounds=((0.0, 10.0),))),  # once an IndexError
    ("bounds", lambda q, k, v: sum_decode(q, k, v, bounds=((0, 5, 10),))),  # once a ValueError (unpacking)
    ("bounds", lambda q, k, v: sum_decode(q, k, v, bounds=5)),
    ("bounds", lambda q, k, v: sum_decode(q, k, v, bounds=[(True, 10)])),
    ("block_k", lambda q, k, v: sum_decode(q, k, v, bounds=((0, 10),), block_k=64.0)),
    ("q", lambda q, k, v: sum_decode(q.to("meta"), k, v, bounds=((0, 10),))),
    ("k", lambda q, k, v: sum_decode(q, k.to_sparse(), v, bounds=((0, 10),))),
    ("k/v", lambda q, k, v: sum_decode(q, k.half(), v, bounds=((0, 10),))),  # once rounded to q's format
    ("scale", lambda q, k, v: sum_decode(q, k, v, bounds=((0, 10),), scale=float("nan"))),
    ("bounds", lambda q, k, v: sum_decode_reference(q, k, v, bounds=((0, 5, 10),))),
    ("k/v", lambda q, k, v: sum_decode_reference(q[..., :0], k[..., :0], v, bounds=((0, 10),))),
])
def test_every_bad_argument_is_one_input_error_naming_it(name, call):
    q, k, v = (t.float() for t in _inputs(10, 1, 8, 8, seed=0))
    with pytest.raises(AttnumInputError, match=f"^{name}=") as err:
        call(q, k, v)
    assert len(str(err.value).splitlines()) == 1


def test_a_tile_longer_than_the_keys_costs_the_keys_memory_and_keeps_the_bits():
    """block_k = 10**5 on S = 100 keys: the same bits as the plain reference, which holds whole tiles, with
    the tile held only as long as the live keys (once: (B H, splits, block_k, D) arrays, ~60 MB here and
    1.37 GB at block_k = 10**6, 23 GB at 10**9)."""
    import tracemalloc

    q, k, v = (t.to(torch.bfloat16) for t in _inputs(100, 2, 16, 16, seed=3))
    bounds = ((0, 37), (37, 100))
    ref = sum_decode_reference(q, k, v, bounds=bounds, block_k=10**5)
    tracemalloc.start()  # numpy reports its allocations to tracemalloc
    try:
        fast = sum_decode(q, k, v, bounds=bounds, block_k=10**5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert torch.equal(fast.view(-1).double(), ref.view(-1).double())
    tile_bytes = 10**5 * (16 + 16) * 4  # one whole float32 K and V tile of one row and split
    assert peak < tile_bytes / 4, peak
    huge = sum_decode(q, k, v, bounds=bounds, block_k=10**9)  # in the memory of 100 keys
    assert huge.shape == (1, 2, 1, 16) and bool(huge.isfinite().all())


@pytest.mark.parametrize("n_live, n", [(1, 9), (7, 8), (100, 128), (100, 129), (129, 1000), (300, 8193),
                                       (1000, 70001), (100, 10**6)])
def test_the_padded_pairwise_sum_is_numpys_sum_of_the_padded_tile(n_live, n):
    import numpy as np

    from attnum.kernels.triton.np_ops import sum_padded

    x = np.abs(np.random.default_rng(n).standard_normal((3, n_live))).astype(np.float32) * np.float32(1.3)
    full = np.zeros((3, n), np.float32)
    full[:, :n_live] = x
    assert np.array_equal(np.sum(full, axis=-1, dtype=np.float32).view(np.int32),
                          np.asarray(sum_padded(x, n), np.float32).view(np.int32))


def test_too_many_splits_to_merge_are_refused_before_anything_is_allocated():
    q, k, v = (t.float() for t in _inputs(10, 1, 8, 64, seed=0))
    with pytest.raises(AttnumInputError, match="^bounds=.*non-empty splits"):
        sum_decode(q, k, v, bounds=[(0, 10)] * ((1 << 27) // 64 + 1))
    with pytest.raises(AttnumInputError, match="^block_k="):  # the plain reference holds whole tiles
        sum_decode_reference(q, k, v, bounds=((0, 10),), block_k=10**6)


def test_the_family_names_itself():
    f = SumDecode("bf16", fused=False)
    assert f.spec() == "tl-sum-decode:bf16,no-fp-fusion" and f.sites()["out"] == "bf16"
    assert f.describe()["qk_sum"] == "butterfly tree in bf16"


@pytest.mark.slow  # interpreted Triton: about 20 s
def test_sglang_and_vllm_decode_kernels_are_this_arithmetic_bit_for_bit():
    fetched_or_skip("sglang", "vllm")
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(HERE / "_sum_decode_kernel_check.py")], capture_output=True,
                         text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert len(got) == 6 and all(f == 1.0 for f in got.values()), got
