"""Block-sparse selection (NSA's selected branch): a query must read the keys of its selected blocks, all of
them, and nothing else.

Native Sparse Attention (Yuan et al., arXiv 2502.11089; fla-org/flash-linear-attention ``parallel_nsa``) and
other block-sparse kernels take ``block_indices`` (B, G, N, n): per KV head and query, the blocks of
``block_size`` keys it attends to, in any order, -1 for none; within the query's causal range (the
target's causal alignment). Hazards: a block listed after the query read without the causal mask, a -1 index
read as block 0 or as the last block, the kernel's tile of queries sharing one query's selection, a partial
last block read past S, a listed block skipped. The blocks a query did not select hold its largest scores
(the "hot" blocks: scores 4 above the rest, a read of one moves the output by O(|V|)), and so do the blocks
listed after its position. The reference is golden attention with the selection as a bool mask.

Cases: random selections of 1 to 3 of the visible cold blocks in random order with -1 padding (block 16,
N = S = 128), selections that list future (hot) blocks, one block (the query's own, partly causal), N < S, GQA with a
different selection per KV head, NSA's default block 64 with a partial last block, and a query whose
selection is all -1 (no key: judged by the target's empty-rows convention). Only targets declaring
``attnum_block_select = True`` are asked.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.features import feature_case, undeclared
from attnum.audit.harness import Case, Probe, ProbeContext

D = 64
HOT = 4.0  # scaled-score lift of a block the query must not read


def select_mask(idx: torch.Tensor, s: int, block: int, keep_causal: torch.Tensor) -> torch.Tensor:
    """(B, G, N, S) bool: key j of query i is selected (its block is listed, index >= 0) and causally visible
    (``keep_causal`` (N, S))."""
    B, G, N, _ = idx.shape
    sel = torch.zeros(B, G, N, -(-s // block) + 1, dtype=torch.bool)
    sel.scatter_(-1, torch.where(idx < 0, sel.shape[-1] - 1, idx), True)  # -1 -> a spare column, dropped
    keys = sel[..., :-1].repeat_interleave(block, dim=-1)[..., :s]
    return keys & keep_causal


def causal_keep(n: int, s: int, alignment: str) -> torch.Tensor:
    off = s - n if alignment == "bottom_right" else 0
    return torch.arange(s)[None, :] <= torch.arange(n)[:, None] + off


def _selection(ctx: ProbeContext, B, G, n, s, block, count, *, future: bool, salt: int) -> tuple:
    """A random selection per (b, g, query) of 1 to ``count`` cold visible blocks (random order, -1 padded;
    ``future``: also one hot block after the query's position), and the hot blocks per (b, g) as (B, G, nb)
    bool (each block hot with probability 0.4, block 0 never: every query has a cold block to select)."""
    nb = -(-s // block)
    off = s - n if ctx.causal_alignment == "bottom_right" else 0
    gen = torch.Generator().manual_seed(ctx.seed * 1009 + salt)
    hot = torch.rand(B, G, nb, generator=gen) < 0.4
    hot[..., 0] = False  # every query keeps a cold block to select
    idx = torch.full((B, G, n, count + future), -1, dtype=torch.long)
    for b in range(B):
        for g in range(G):
            for i in range(n):
                last = (i + off) // block
                cold = [t for t in range(last + 1) if not hot[b, g, t]]
                take = int(torch.randint(1, count + 1, (1,), generator=gen))  # 1..count: -1 padding is common
                pick = [cold[j] for j in torch.randperm(len(cold), generator=gen)[:take].tolist()]
                later = [t for t in range(last + 1, nb) if hot[b, g, t]]
                if future and later:  # one hot block after the query's position
                    pick.append(later[int(torch.randint(len(later), (1,), generator=gen))])
                perm = torch.randperm(len(pick), generator=gen).tolist()
                idx[b, g, i, :len(pick)] = torch.tensor([pick[j] for j in perm], dtype=torch.long)
    return idx, hot


def _case(ctx: ProbeContext, label: str, *, B=1, H=1, G=1, n=128, s=128, block=16, count=3, future=False,
          idx=None, salt=0) -> Case:
    scale = 1.0 / math.sqrt(D)
    if idx is None:
        idx, hot = _selection(ctx, B, G, n, s, block, count, future=future, salt=salt)
    else:
        hot = torch.zeros(B, G, -(-s // block), dtype=torch.bool)
    hot_keys = hot.repeat_interleave(block, dim=-1)[..., :s].double()  # (B, G, S)
    q = 0.05 * ctx.randn(B, H, n, D, salt=salt + 1)
    k = 0.05 * ctx.randn(B, G, s, D, salt=salt + 2)
    q[..., 0] = 1.0
    k[..., 0] = HOT * hot_keys / scale
    q, k, v = ctx.cast(q, k, 4.0 * ctx.randn(B, G, s, D, salt=salt + 3))
    keep = select_mask(idx, s, block, causal_keep(n, s, ctx.causal_alignment))  # (B, G, N, S)
    keep = keep.repeat_interleave(H // G, dim=1)
    kw = {"is_causal": True, "block_indices": idx, "block_size": block}
    if H != G:
        kw["enable_gqa"] = True
    return feature_case(ctx, label, (q, k, v), kw, (q, k, v), {"attn_mask": keep, "enable_gqa": H != G})


def run(ctx: ProbeContext) -> list[Case]:
    missing = undeclared(ctx, "block_select", "block_indices=(B, G, N, n), block_size=")
    if missing is not None:
        return [missing]
    own = torch.arange(96).div(16, rounding_mode="floor").view(1, 1, 96, 1)
    empty = own.clone()
    empty[..., 40, :] = -1
    return [
        _case(ctx, "1-3 of the visible blocks, random order, -1 padded (block 16, N = S = 128)", salt=10),
        _case(ctx, "selections also listing a later block (hot), block 16", future=True, salt=20),
        _case(ctx, "only the query's own block (partly causal), N = S = 96", n=96, s=96, idx=own, salt=30),
        _case(ctx, f"N = 24 < S = 128 ({ctx.causal_alignment}), 1-2 blocks each", n=24, count=2, salt=40),
        _case(ctx, "GQA H = 4 over G = 2, a selection per KV head", B=2, H=4, G=2, n=64, s=64, count=2, salt=50),
        _case(ctx, "block 64 (NSA's default), S = 200: a partial last block", n=200, s=200, block=64, count=2,
              future=True, salt=60),
        _case(ctx, "query 40 selects nothing (all -1): an empty row", n=96, s=96, idx=empty, salt=70),
    ]


PROBE = Probe(
    name="block-select",
    summary="block_indices (NSA's selected branch): unselected and later blocks score highest; a read of one fails",
    refs=("arXiv 2502.11089 (Native Sparse Attention)", "fla-org/flash-linear-attention fla/ops/nsa"),
    run=run,
)
