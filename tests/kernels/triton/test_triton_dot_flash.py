"""attnum.kernels.triton.dot_flash: Triton's flash forward (the fused-attention tutorial's arithmetic).

- ``dot_flash`` and its plain reference (one program per head, tile by tile as the kernel is written) give
  the same bits, over formats, tiles (S a multiple or not), architectures and both FP-fusion settings;
- against float64 attention, within a bound derived from the formats (below);
- the tutorial-style kernel of examples/triton_tutorial/, interpreted under the faithful model, equals it
  bit for bit (a child process: tests/_dot_flash_kernel_check.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import _paths
import pytest
import torch

from attnum import golden_attention
from attnum.errors import AttnumInputError
from attnum.kernels.triton.dot_flash import DotFlash, dot_flash, dot_flash_reference

DT = {"bf16": torch.bfloat16, "fp16": torch.float16}
U = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


def _inputs(S, H, d, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, 1, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, H, S, d, generator=g, dtype=torch.float64) * 2
    v = torch.randn(1, H, S, d, generator=g, dtype=torch.float64) + 0.25
    return q, k, v


@pytest.mark.parametrize("fmt,S,d,block_n,arch,fused", [
    ("fp16", 128, 32, 32, "sm90", True),
    ("fp16", 100, 64, 16, "sm80", False),  # S not a multiple of the tile
    ("bf16", 97, 32, 64, "sm90", False),
    ("bf16", 256, 16, 128, "sm89", True),
])
def test_fast_path_and_reference_give_the_same_bits(fmt, S, d, block_n, arch, fused):
    q, k, v = (t.to(DT[fmt]) for t in _inputs(S, 3, d, seed=S))
    fast = dot_flash(q, k, v, block_n=block_n, arch=arch, fused=fused)
    ref = dot_flash_reference(q, k, v, block_n=block_n, arch=arch, fused=fused)
    assert fast.dtype == q.dtype and fast.shape == (1, 3, 1, d)
    assert torch.equal(fast.view(-1).double(), ref.view(-1).double())


def test_architecture_and_tile_are_different_arithmetics():
    q, k, v = (t.to(torch.float16) for t in _inputs(512, 4, 64, seed=1))
    a = dot_flash(q, k, v, block_n=32, arch="sm90")
    assert not torch.equal(a, dot_flash(q, k, v, block_n=32, arch="sm80"))
    assert not torch.equal(a, dot_flash(q, k, v, block_n=64, arch="sm90"))


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_against_float64_within_the_derived_bound(fmt):
    """Inputs with q, k in {-1, 0, 1} and scale 1/8 (d = 64): every score is an integer / 8, exact on the
    MMA and in fp32, so what is left is the fp32 softmax (exp2 of a rounded argument: |s| <= 8, its
    rounding u32 |s| ln 2 relative, the fma'd running sums: 2 (S + 8) u32), P's cast to the input format
    before the P V dot (u_in relative per P: at most u_in max|v| on the output), the MMA's truncation of
    every group to 24 fraction bits (2^-23 relative per group, S / 8 groups), and half an ulp of the
    output (u_in |o|)."""
    S, H, d = 512, 4, 64
    g = torch.Generator().manual_seed(5)
    q64 = torch.randint(-1, 2, (1, H, 1, d), generator=g).double()
    k64 = torch.randint(-1, 2, (1, H, S, d), generator=g).double()
    v64 = torch.randn(1, H, S, d, generator=g, dtype=torch.float64) + 0.25
    q, k, v = (t.to(DT[fmt]) for t in (q64, k64, v64))
    out = dot_flash(q, k, v, block_n=32, arch="sm90").double()
    gold = golden_attention(q.double(), k.double(), v.double())
    u32, vmax = 2.0 ** -24, float(v.double().abs().max())
    bound = (U[fmt] + (2 * (S + 8) + 8 * 8 + S // 8 * 2) * u32) * vmax + U[fmt] * gold.abs()
    err = (out - gold).abs()
    assert float(err.max()) > 0 and bool((err <= bound).all()), (float(err.max()), float(bound.max()))


def test_bad_input_names_the_parameter():
    q, k, v = (t.half() for t in _inputs(64, 1, 32, seed=0))
    with pytest.raises(AttnumInputError, match="block_n"):
        dot_flash(q, k, v, block_n=0)
    with pytest.raises(AttnumInputError, match="q"):
        dot_flash(q.float(), k.float(), v.float())
    with pytest.raises(AttnumInputError, match="arch"):
        dot_flash(q, k, v, arch="sm70")
    with pytest.raises(AttnumInputError, match="q"):
        dot_flash(q.expand(1, 1, 2, 32), k, v)


def test_the_family_names_itself():
    f = DotFlash("fp16", arch="sm90", fused=False)
    assert f.spec() == "tl-dot-flash:fp16,mma=sm90,no-fp-fusion" and f.sites()["probs"] == "fp16"


@pytest.mark.slow  # interpreted Triton: about a minute
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs the triton extra")
def test_the_tutorial_kernel_is_this_arithmetic_bit_for_bit():
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(_paths.ROOT / "src"), str(_paths.TESTS), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(_paths.TESTS / "_dot_flash_kernel_check.py")], capture_output=True,
                         text=True, timeout=_paths.HANG_S, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert len(got) == 6 and all(f == 1.0 for f in got.values()), got
