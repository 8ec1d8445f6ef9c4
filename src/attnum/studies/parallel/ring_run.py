"""Ring attention for real: one process per shard over torch.distributed (gloo on CPU, nccl on GPU).

Each rank holds its shard's Q, K, V (:func:`attnum.attention.parallel.ring.shard_positions`); at every step it
posts the K/V block it holds to rank r + 1 and a receive from rank r - 1 (isend/irecv, each waited on
with the run's timeout), computes the block it holds with the same :class:`RingRank` the simulation
uses, and then swaps in the received block. The ranks' outputs are gathered back in the parent by
position. Nothing but communication differs from :func:`attnum.attention.parallel.ring.ring_attention`, so the
outputs agree bit for bit (tests/studies/test_ring_dist.py) when both run with the same BLAS thread count
(the ranks run one thread each; so must the simulation compared with them).
"""

from __future__ import annotations

from datetime import timedelta

import torch

from attnum.attention.parallel.ring import RingPlan, RingRank, plan_for, shard_positions
from attnum.studies.parallel.spawn import run_ranks


def _ring_rank(rank: int, world: int, q, k, v, layout: str, plan: RingPlan, timeout: float, backend: str):
    import torch.distributed as dist

    device = torch.device(f"cuda:{torch.cuda.current_device()}") if backend == "nccl" else torch.device("cpu")
    pos = shard_positions(q.shape[2], world, layout)
    mine = pos[rank]
    q_r, k_cur, v_cur = (t[:, :, mine].contiguous().to(device) for t in (q, k, v))
    rr = RingRank(q_r, mine.to(device), plan, v.shape[-1])
    wait = timedelta(seconds=timeout)
    for s in range(world):
        j = (rank - s) % world  # whose block this rank holds now
        works = []
        if s < world - 1:
            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            works = [dist.isend(k_cur, nxt), dist.isend(v_cur, nxt), dist.irecv(k_next, prv), dist.irecv(v_next, prv)]
        rr.step(k_cur, v_cur, pos[j].to(device))
        for w in works:
            w.wait(wait)
        if works:
            k_cur, v_cur = k_next, v_next
    o, lse = rr.finish()
    return o.cpu(), lse.cpu()


def ring_attention_distributed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False,
                               scale: float | None = None, policy="fa2:bf16", shards: int = 2,
                               layout: str = "contiguous", merge_policy="fp32", merge_method: str = "lse",
                               block_q: int | None = None, block_k: int | None = None, backend: str = "gloo",
                               timeout: float = 120.0, fault: dict | None = None, return_lse: bool = False):
    """:func:`attnum.attention.parallel.ring.ring_attention`'s arguments, run on ``shards`` processes.

    ``backend``: ``gloo`` (CPU) or ``nccl`` (one GPU per rank). A rank that fails or dies raises
    :class:`attnum.studies.parallel.spawn.RankFailed` naming it; ``timeout`` bounds every wait.
    """
    plan = plan_for(q, k, v, is_causal=is_causal, scale=scale, policy=policy, merge_policy=merge_policy,
                    merge_method=merge_method, block_q=block_q, block_k=block_k)
    pos = shard_positions(q.shape[2], shards, layout)  # validates before any process starts
    outs = run_ranks(_ring_rank, shards, args=(q, k, v, layout, plan, timeout, backend), backend=backend,
                     timeout=timeout, fault=fault)
    out = outs[0][0].new_empty(*q.shape[:3], v.shape[-1])
    lse = outs[0][1].new_empty(q.shape[:3])
    for r, (o_r, lse_r) in enumerate(outs):
        out[:, :, pos[r]], lse[:, :, pos[r]] = o_r, lse_r
    return (out, lse) if return_lse else out
