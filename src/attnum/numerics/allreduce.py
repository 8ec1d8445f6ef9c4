"""Sums across ranks in a float format, in the order a collective performs them.

Shape alphabet: P ranks; a rank's tensor has n elements (any shape; it is flattened); M tokens,
K the contracted (input) dim, Nout the output dim of a linear layer.

Every addition is one ``round_to(a + b, fmt)`` of two values on the format's grid, which is what a
native add does: the float64 sum of two bf16/fp16/fp32 values is exact or lands far from a
rounding boundary, and gloo/NCCL add bf16 and fp16 through float32 and round back, which is again
the correctly rounded sum. Only the order differs between algorithms:

- ``gloo-ring`` -- gloo's ring all-reduce (gloo/allreduce.cc, ``ring``), which ProcessGroupGloo runs
  for CPU tensors. The buffer is cut into numSegments = roundUp(max(ceil(bytes / 1 MiB), 2P), P)
  segments of roundUp(ceil(bytes / numSegments), elementSize) bytes; chunk c is segments
  [c nspr, (c+1) nspr), nspr = numSegments / P. Chunk c starts at rank c-1 and travels down the
  ring, each rank adding its own values to the received partial sum, and ends at rank c:
  x_{c-1} + x_{c-2} + ... + x_c. tests/test_allreduce_gloo.py checks this bit for bit against
  torch.distributed's gloo with 2 and 4 processes.
- ``nccl-ring`` -- NCCL's ring order (chunk c starts at rank c+1 and ends at rank c: x_{c+1} + ... + x_c),
  with the buffer split into P even chunks; NCCL's own chunking (loop steps x channels) is not
  modelled, and nothing here is checked against NCCL.
- ``tree`` -- a pairwise binary tree over ranks in rank order ((x0 + x1) + (x2 + x3)) ...; a model of a
  tree all-reduce, not NCCL's double binary tree.
- ``sequential`` -- x_0 + x_1 + ... + x_{P-1} (a reduce to rank 0 in rank order).

For P = 2 every order is the same sum (addition is commutative): only P >= 3 tells them apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from attnum.errors import bad_value
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.rounding import round_to

ALGORITHMS = ("gloo-ring", "nccl-ring", "tree", "sequential")
GLOO_MAX_SEGMENT_BYTES = 1024 * 1024  # gloo::detail::AllreduceOptionsImpl::kMaxSegmentSize


def element_bytes(fmt: FloatFormat) -> int:
    """Bytes a tensor of ``fmt`` takes per element (the dtype torch would carry it in)."""
    return max(1, math.ceil(fmt.bits / 8))


def gloo_chunks(n: int, P: int, elem_bytes: int) -> torch.Tensor:
    """(n,) the gloo ring chunk (0..P-1) each element belongs to (see the module docstring)."""
    total = n * elem_bytes
    max_seg = elem_bytes * max(1, GLOO_MAX_SEGMENT_BYTES // elem_bytes)
    num_segments = _round_up(max(_ceil_div(total, max_seg), 2 * P), P)
    seg_bytes = _round_up(_ceil_div(total, num_segments), elem_bytes)
    per_rank = num_segments // P
    seg = torch.arange(n, dtype=torch.int64) * elem_bytes // seg_bytes
    return (seg // per_rank).clamp_(max=P - 1)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def _even_chunks(n: int, P: int) -> torch.Tensor:
    sizes = [len(c) for c in torch.arange(n).tensor_split(P)]
    return torch.repeat_interleave(torch.arange(P), torch.tensor(sizes))


def rank_order(P: int, algorithm: str) -> torch.Tensor:
    """(P, P): row c lists the ranks in the order chunk c is summed (ring algorithms, sequential)."""
    c = torch.arange(P)[:, None]
    i = torch.arange(P)[None, :]
    if algorithm == "gloo-ring":
        return (c - 1 - i) % P
    if algorithm == "nccl-ring":
        return (c + 1 + i) % P
    return i.expand(P, P)


def allreduce_sum(parts: Sequence[torch.Tensor] | torch.Tensor, fmt: str | FloatFormat, *,
                  algorithm: str = "gloo-ring") -> torch.Tensor:
    """The all-reduced sum of P rank tensors (each already on ``fmt``'s grid), float64, rank 0's shape."""
    fmt = get_format(fmt)
    if algorithm not in ALGORITHMS:
        raise bad_value("algorithm", algorithm, f"one of {ALGORITHMS}")
    X = torch.stack([torch.as_tensor(p).double().reshape(-1) for p in parts])  # (P, n)
    P, n = X.shape
    shape = torch.as_tensor(parts[0]).shape
    if P == 1:
        return X[0].reshape(shape)
    if algorithm == "tree":
        level = list(X)
        while len(level) > 1:
            nxt = [round_to(level[i] + level[i + 1], fmt) for i in range(0, len(level) - 1, 2)]
            level = nxt + ([level[-1]] if len(level) % 2 else [])
        return level[0].reshape(shape)
    chunk = gloo_chunks(n, P, element_bytes(fmt)) if algorithm == "gloo-ring" else _even_chunks(n, P)
    order = rank_order(P, algorithm)[chunk].T  # (P, n): the rank added at step i for each element
    Xo = X.gather(0, order)
    acc = Xo[0]
    for i in range(1, P):
        acc = round_to(acc + Xo[i], fmt)
    return acc.reshape(shape)


def row_parallel_linear(x_MK: torch.Tensor, w_KN: torch.Tensor, *, tp: int, reduce_format: str | FloatFormat,
                        algorithm: str = "gloo-ring", io_format: str | FloatFormat = "bf16") -> torch.Tensor:
    """Megatron's row-parallel linear Y = X W with K split over ``tp`` ranks, float64 on the grid.

    Inputs rounded to ``io_format``; each rank's partial X_r W_r is a float32 GEMM (fp32
    accumulation, as tensor cores and CPU BLAS do) rounded to ``reduce_format`` (the all-reduce's
    dtype); the partials are all-reduced in that format in ``algorithm``'s order; the sum is
    rounded to ``io_format``. ``tp = 1`` is the unsharded layer (no reduction).
    """
    io, red = get_format(io_format), get_format(reduce_format)
    K = x_MK.shape[-1]
    if not isinstance(tp, int) or tp < 1 or K % tp:
        raise bad_value("tp", tp, f"a positive divisor of K={K}")
    x = round_to(x_MK.double(), io).float()
    w = round_to(w_KN.double(), io).float()
    parts = [round_to((xs @ ws).double(), red) for xs, ws in zip(x.tensor_split(tp, -1), w.tensor_split(tp, 0))]
    return round_to(allreduce_sum(parts, red, algorithm=algorithm), io)


def grad_allreduce_mean(grads: Sequence[torch.Tensor], fmt: str | FloatFormat, *,
                        algorithm: str = "gloo-ring") -> torch.Tensor:
    """Data-parallel gradient averaging: the all-reduced sum in ``fmt``, divided by P and rounded
    (DDP's default: all-reduce, then divide by the world size)."""
    fmt = get_format(fmt)
    g = [round_to(torch.as_tensor(t).double(), fmt) for t in grads]
    return round_to(allreduce_sum(g, fmt, algorithm=algorithm) / len(g), fmt)
