"""Run by tests/kernels/triton/test_triton_sum_decode.py in a child process with TRITON_INTERPRET=1: SGLang 0.5.3's
``decode_attention_fwd`` and vLLM 0.33.0's ``triton_decode_attention`` under attnum's faithful Triton
model, against :func:`attnum.kernels.triton.sum_decode.sum_decode` with each kernel's own split cut
(SGLang: ceil(ceil(S / n) / 32) * 32 keys per split, vLLM: ceil(S / n)) and tile (BLOCK = 64). The
inputs are float64 tensors cast to the dtype, as a user passes them. Prints one JSON line: per case, the
fraction of output elements that are bit-identical."""

import json
import math

import torch

from attnum.kernels.triton import interp as triton_interp

triton_interp.enable()

from attnum.kernels import registry  # noqa: E402
from attnum.kernels.triton.sum_decode import sum_decode  # noqa: E402

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
CASES = [  # (kernel, dtype, S, num_splits, heads, d)
    ("sglang-decode", "bf16", 300, 3, 2, 48),
    ("sglang-decode", "fp16", 777, 5, 2, 16),
    ("sglang-decode", "fp32", 130, 7, 2, 80),
    ("vllm-triton-decode", "bf16", 500, 4, 2, 80),
    ("vllm-triton-decode", "fp16", 129, 1, 2, 32),
    ("vllm-triton-decode", "fp32", 300, 3, 2, 64),
]


def cut(name: str, S: int, n: int) -> tuple:
    per = math.ceil(math.ceil(S / n) / 32) * 32 if name == "sglang-decode" else math.ceil(S / n)
    return tuple((s * per, min((s + 1) * per, S)) for s in range(n))


out = {}
for i, (name, dt, S, n, H, d) in enumerate(CASES):
    g = torch.Generator().manual_seed(i)
    q = torch.randn(1, H, 1, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, H, S, d, generator=g, dtype=torch.float64) * 3
    v = torch.randn(1, H, S, d, generator=g, dtype=torch.float64) + 0.5
    x = [t.to(DT[dt]) for t in (q, k, v)]
    got = registry.resolve(name).fn.decode(*x, cache_seqlens=torch.tensor([S], dtype=torch.int32), num_splits=n)
    mine = sum_decode(q.to(DT[dt]), k.to(DT[dt]), v.to(DT[dt]), bounds=cut(name, S, n), block_k=64)
    out[f"{name},{dt},S={S},n={n},d={d}"] = float((mine.view(-1).double() == got.view(-1).double()).double().mean())
print(json.dumps(out))
