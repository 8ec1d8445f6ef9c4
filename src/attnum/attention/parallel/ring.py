"""Context-parallel (ring) attention: P shards of the sequence, K/V blocks passed round the ring, each
step's partial (O, LSE) merged into a running state (Liu et al., "Ring Attention with Blockwise
Transformers", 2023; ring-flash-attention; torch's context_parallel).

Shape alphabet: B batch, H heads, G kv heads, N sequence (queries = keys), L = N / P positions per
shard, d head dim, dv value dim.

Layouts (which global positions shard r holds):

- ``contiguous``: [r L, (r+1) L) -- needs N % P == 0. Under a causal mask shard r has r + 1 blocks
  of work, so the last shard does P times the first's.
- ``zigzag``: the sequence in 2P chunks of C = N / (2P); shard r holds chunks r and 2P-1-r
  (ring-flash-attn's zigzag, torch CP's round-robin) -- needs N % 2P == 0; every shard has the same work.

Step s on rank r: it holds the K/V of rank j = (r - s) mod P (passed from rank r - 1). Its queries
attend that block with the causal mask in *global* positions (:func:`block_state`): a block no query
sees is skipped (ring-flash-attn's ``step <= rank``); queries that see none of its keys get the empty
state (0, -inf) -- zigzag's first chunk for j > r -- and merge exactly (attention/serving/merge.py); only the
bounding box of visible (query, key) pairs is computed, with no mask, a top-left causal mask, or the
boolean mask it holds. The partial state is merged into the running one with
:func:`attnum.attention.serving.merge.merge_state` under the *merge policy* (``fp32``: ring-flash-attn and
torch CP accumulate in fp32; ``fp32,out=bf16``: the running output returned in bf16 after every step;
with an attention policy such as ``fa2:bf16`` every block's O arrives in bf16, as flash-attn returns it,
the precision loss ring-flash-attn's README warns about). The final output is rounded to the
attention policy's ``out`` format.

:func:`ring_attention` is the simulation in one process, the plain reference; the same
:class:`RingRank` runs one per process over torch.distributed in :mod:`attnum.studies.parallel.ring_run`,
bit for bit the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.attention import masks
from attnum.attention.flash import flash_attention
from attnum.attention.serving.merge import METHODS, State, empty_state, merge_state
from attnum.errors import AttnumInputError, bad_value
from attnum.numerics.policy import Policy, parse_policy
from attnum.numerics.rounding import round_to

LAYOUTS = ("contiguous", "zigzag")


def shard_positions(N: int, P: int, layout: str) -> list[torch.Tensor]:
    """The global positions (L,) shard r holds, r = 0..P-1, ascending."""
    if layout not in LAYOUTS:
        raise bad_value("layout", layout, f"one of {LAYOUTS}")
    if not isinstance(P, int) or isinstance(P, bool) or P < 1:
        raise bad_value("shards", P, "a positive integer")
    parts = P if layout == "contiguous" else 2 * P
    if N % parts:
        need = "N % P == 0" if layout == "contiguous" else "N % (2P) == 0"
        raise AttnumInputError(f"shards={P} is not allowed for seq_len={N} with layout={layout!r}; it needs {need}")
    if layout == "contiguous":
        L = N // P
        return [torch.arange(r * L, (r + 1) * L) for r in range(P)]
    C = N // (2 * P)
    return [torch.cat([torch.arange(r * C, (r + 1) * C), torch.arange((2 * P - 1 - r) * C, (2 * P - r) * C)])
            for r in range(P)]


@dataclass(frozen=True, kw_only=True)
class RingPlan:
    """What every rank computes with: the attention policy and tiles, the merge policy and method."""

    causal: bool
    scale: float
    policy: Policy
    merge_policy: Policy
    merge_method: str = "lse"
    block_q: int | None = None
    block_k: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", parse_policy(self.policy))
        object.__setattr__(self, "merge_policy", parse_policy(self.merge_policy))
        if self.merge_method not in METHODS:
            raise bad_value("merge_method", self.merge_method, f"one of {METHODS}")


def _span(mask_1d: torch.Tensor) -> tuple[int, int]:
    idx = torch.nonzero(mask_1d).squeeze(-1)
    return int(idx[0]), int(idx[-1]) + 1


def block_state(q_BHLd: torch.Tensor, k_BGLd: torch.Tensor, v_BGLd: torch.Tensor, q_pos: torch.Tensor,
                k_pos: torch.Tensor, plan: RingPlan) -> State | None:
    """One rank's queries over one K/V block -> State(o (B, H, Lq, dv), lse (B, H, Lq)), or None
    when no query sees any key of the block."""
    B, H, Lq, _ = q_BHLd.shape
    kw = dict(scale=plan.scale, policy=plan.policy, block_q=plan.block_q, block_k=plan.block_k, return_lse=True)
    if not plan.causal:
        return State(*flash_attention(q_BHLd, k_BGLd, v_BGLd, **kw))
    keep = masks.causal_keep(q_pos, k_pos)  # (Lq, Lk) in global positions
    rows, cols = keep.any(1), keep.any(0)
    if not bool(rows.any()):
        return None
    r0, r1 = _span(rows)
    c0, c1 = _span(cols)
    sub = keep[r0:r1, c0:c1]
    if bool(sub.all()):
        mask, causal = None, False
    elif torch.equal(sub, masks.masking(None, True, (1, 1, r1 - r0, c1 - c0)).structural(0, r1 - r0, 0, c1 - c0,
                                                                                         sub.device)):
        mask, causal = None, True
    else:
        mask, causal = sub, False
    o, lse = flash_attention(q_BHLd[:, :, r0:r1], k_BGLd[:, :, c0:c1], v_BGLd[:, :, c0:c1], attn_mask=mask,
                             is_causal=causal, **kw)
    if (r0, r1) == (0, Lq):
        return State(o, lse)
    o_full = o.new_zeros(B, H, Lq, o.shape[-1])
    lse_full = lse.new_full((B, H, Lq), -math.inf)  # queries that see nothing: the empty state
    o_full[:, :, r0:r1], lse_full[:, :, r0:r1] = o, lse
    return State(o_full, lse_full)


class RingRank:
    """One rank's running state: ``step`` with each K/V block as it arrives, then ``finish``."""

    def __init__(self, q_BHLd: torch.Tensor, q_pos: torch.Tensor, plan: RingPlan, dv: int) -> None:
        self.q, self.q_pos, self.plan = q_BHLd, q_pos, plan
        B, H, L, _ = q_BHLd.shape
        self.state = empty_state((B, H, L), dv, dtype=plan.merge_policy.carrier, device=q_BHLd.device)

    def step(self, k_BGLd: torch.Tensor, v_BGLd: torch.Tensor, k_pos: torch.Tensor) -> None:
        blk = block_state(self.q, k_BGLd, v_BGLd, self.q_pos, k_pos, self.plan)
        if blk is not None:
            self.state = merge_state(self.state, blk, policy=self.plan.merge_policy, method=self.plan.merge_method)

    def finish(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(O (B, H, L, dv) on the attention policy's ``out`` grid, LSE (B, H, L) float64)."""
        return round_to(self.state.o, self.plan.policy.out), self.state.lse.double()


def plan_for(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool, scale: float | None,
             policy, merge_policy, merge_method: str, block_q: int | None, block_k: int | None) -> RingPlan:
    """Validate a ring call's tensors (N == S: queries and keys are sharded alike) and build its plan."""
    _, _, _, N, S, d, _ = masks.check_qkv(q, k, v)
    if N != S:
        raise AttnumInputError(f"kv length={S} is not allowed; ring attention shards queries and keys alike "
                               f"(expected S == N == {N})")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    return RingPlan(causal=bool(is_causal), scale=scale, policy=policy, merge_policy=merge_policy,
                    merge_method=merge_method, block_q=block_q, block_k=block_k)


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    policy: str | Policy = "fa2:bf16",
    shards: int = 2,
    layout: str = "contiguous",
    merge_policy: str | Policy = "fp32",
    merge_method: str = "lse",
    block_q: int | None = None,
    block_k: int | None = None,
    return_lse: bool = False,
):
    """Ring attention simulated in one process: (B, H, N, d) x (B, G, N, d) x (B, G, N, dv) -> (B, H, N, dv).

    The keyword arguments of golden/baseline/flash (causal masks top-left; N == S), plus the ring's
    ``shards``, ``layout``, ``merge_policy`` and ``merge_method`` (see the module docstring).
    """
    if attn_mask is not None:
        raise bad_value("attn_mask", "a tensor", "None (ring attention takes is_causal; an arbitrary mask "
                        "would have to be sharded with the layout)")
    plan = plan_for(q, k, v, is_causal=is_causal, scale=scale, policy=policy, merge_policy=merge_policy,
                    merge_method=merge_method, block_q=block_q, block_k=block_k)
    pos = shard_positions(q.shape[2], shards, layout)
    qs = [q[:, :, p] for p in pos]
    ks = [k[:, :, p] for p in pos]
    vs = [v[:, :, p] for p in pos]
    dv = v.shape[-1]
    out, lse = None, None
    for r in range(shards):
        rank = RingRank(qs[r], pos[r], plan, dv)
        for s in range(shards):
            j = (r - s) % shards  # the block that reached rank r after s hops
            rank.step(ks[j], vs[j], pos[j])
        o_r, lse_r = rank.finish()
        if out is None:
            out = o_r.new_empty(*q.shape[:3], dv)
            lse = lse_r.new_empty(q.shape[:3])
        out[:, :, pos[r]], lse[:, :, pos[r]] = o_r, lse_r
    return (out, lse) if return_lse else out
