"""Run by tests/kernels/adapters/test_fla.py in a child process with TRITON_INTERPRET=1: fla's parallel_attn with cu_seqlens
(ragged lengths 5, 0, 19, 1 in one packed batch) under the faithful model. Prints one JSON line per dtype:
whether each sequence's rows equal the dense call on that sequence alone, bitwise, and the largest
error against golden."""

import json

import torch

from attnum.kernels.triton import interp as triton_interp

triton_interp.enable()

from attnum import golden_attention  # noqa: E402
from attnum.kernels.adapters import fla  # noqa: E402

run = triton_interp.under(fla.parallel_sdpa, "faithful")
LENS, H, D = (5, 0, 19, 1), 2, 32
out = {}
for dt in (torch.float16, torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, sum(LENS), D, generator=g).to(dt) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(LENS).cumsum(0).tolist()], dtype=torch.long)
    o = run(q, k, v, is_causal=True, cu_seqlens=cu)
    same, err = [], 0.0
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        if b == a:
            continue
        dense = run(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], is_causal=True)
        same.append(bool(torch.equal(dense, o[:, :, a:b])))
        gold = golden_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], is_causal=True)
        err = max(err, float((o[:, :, a:b].double() - gold).abs().max()))
    out[str(dt).split(".")[-1]] = {"bitwise_dense": same, "err": err, "finite": bool(torch.isfinite(o).all())}
print(json.dumps(out))
