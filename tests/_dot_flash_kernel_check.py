"""Run by tests/kernels/triton/test_triton_dot_flash.py in a child process with TRITON_INTERPRET=1: the
tutorial-style kernel of examples/triton_tutorial/fused_attention.py (through tutorial_decode.py, one query
row) under attnum's faithful Triton model, against :func:`attnum.kernels.triton.dot_flash.dot_flash`. The
inputs are float64 tensors cast to the dtype. Prints one JSON line: per case, the fraction of output
elements that are bit-identical."""

import json
import sys

import _paths
import torch

from attnum.kernels.triton import interp as triton_interp

triton_interp.enable()
sys.path.insert(0, str(_paths.EXAMPLES / "triton_tutorial"))

import fused_attention  # noqa: E402
import tutorial_decode  # noqa: E402

from attnum.kernels.triton.dot_flash import dot_flash  # noqa: E402
from attnum.kernels.triton.faithful import wrap  # noqa: E402

DT = {"bf16": torch.bfloat16, "fp16": torch.float16}
CASES = [  # (dtype, S, heads, d, BLOCK_N, arch, fp fusion)
    ("fp16", 128, 2, 32, 32, "sm90", True),
    ("fp16", 192, 2, 64, 64, "sm80", True),
    ("fp16", 128, 2, 32, 16, "sm90", False),
    ("bf16", 128, 2, 32, 32, "sm90", True),
    ("bf16", 192, 2, 32, 64, "sm89", False),
    ("bf16", 128, 2, 64, 16, "sm100", True),
]

out = {}
for i, (dt, S, H, d, bn, arch, fused) in enumerate(CASES):
    g = torch.Generator().manual_seed(i)
    q = torch.randn(1, H, 1, d, generator=g, dtype=torch.float64) * 2
    k = torch.randn(1, H, S, d, generator=g, dtype=torch.float64) + torch.linspace(0, 2, S, dtype=torch.float64).view(1, 1, S, 1)
    v = torch.randn(1, H, S, d, generator=g, dtype=torch.float64) + 0.5
    x = [t.to(DT[dt]) for t in (q, k, v)]
    fused_attention.BLOCK_N = bn
    got = wrap(tutorial_decode.sdpa, arch=arch, fp_fusion=fused)(*x)
    mine = dot_flash(*x, block_n=bn, arch=arch, fused=fused)
    out[f"{dt},S={S},d={d},BLOCK_N={bn},{arch},fusion={fused}"] = float(
        (mine.view(-1).double() == got.view(-1).double()).double().mean())
print(json.dumps(out))
