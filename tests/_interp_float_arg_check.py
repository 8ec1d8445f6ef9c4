"""Run by tests/kernels/triton/test_triton_faithful.py in a child with TRITON_INTERPRET=1: a kernel multiplying a bf16
tensor by a float argument (``scale``, typed fp32 by Triton's launcher) and by a float constexpr
(``C``, a weak scalar in compiled Triton too), storing both products to fp32. Prints one JSON line: the
products under attnum's faithful model, as lists of floats."""

import json

import torch
import triton
import triton.language as tl

from attnum.kernels.triton import faithful as triton_faithful


@triton.jit
def _scale(x_ptr, by_arg_ptr, by_const_ptr, scale, C: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(by_arg_ptr + offs, x * scale)
    tl.store(by_const_ptr + offs, x * C)


def run(x, scale, c):
    a, b = torch.empty(x.numel()), torch.empty(x.numel())
    _scale[(1,)](x, a, b, scale, C=c, BLOCK=x.numel())
    return a.tolist(), b.tolist()


x = (torch.arange(1, 65, dtype=torch.float64) * 1.37).to(torch.bfloat16)
with triton_faithful.faithful():
    faithful = run(x, 0.1, 0.1)
print(json.dumps({"x": x.float().tolist(), "faithful": faithful}))
