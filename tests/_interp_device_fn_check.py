"""Run by tests/kernels/triton/test_triton_faithful.py in a child with TRITON_INTERPRET=1: a kernel that calls device
functions in its loop (``tl.cdiv`` from triton.language.standard, whose globals hold ``core``, and a
helper of its own), under attnum's faithful model and as Triton runs it. Prints one JSON line: whether
the outputs are equal, how often triton.language was patched per launch under the model, and whether
every attribute of ``tl.core`` is its original object again after the faithful launches."""

import json

import torch
import triton
import triton.language as tl
from triton.runtime import interpreter as I

from attnum.kernels.triton import faithful as triton_faithful


@triton.jit
def _halve(x):
    return x * 0.5 + tl.cdiv(7, 2)


@triton.jit
def _kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(tl.cdiv(n, BLOCK)):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        acc += _halve(tl.load(x_ptr + offs, mask=offs < n, other=0.0))
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


def run(x):
    out = torch.empty(16)
    _kernel[(1,)](x, out, x.numel(), BLOCK=16)
    return out


calls = [0]
orig = I._patch_lang


def counting(fn):
    calls[0] += 1
    return orig(fn)


I._patch_lang = counting
x = torch.arange(80, dtype=torch.float32) / 8
raw = run(x)
raw_patches, calls[0] = calls[0], 0
before = {n: getattr(tl.core, n) for n in dir(tl.core)}
with triton_faithful.faithful(fp_fusion=False):
    first = run(x)
    second = run(x)
restored = all(getattr(tl.core, n) is v for n, v in before.items())
print(json.dumps({"equal": bool(torch.equal(raw, first) and torch.equal(first, second)),
                  "raw_patches": raw_patches, "faithful_patches": calls[0], "restored": restored}))
