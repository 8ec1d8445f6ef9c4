"""FlashAttention's tiled forward kernel with online softmax, every rounding site named.

:func:`flash_forward` runs on inputs already loaded into the carrier; :func:`attnum.attention.flash.flash_attention`
is the public entry (it loads the inputs and picks this forward alone, or with the recomputing backward of
:mod:`attnum.attention.flash_backward` when a gradient is wanted).

Shape alphabet: B batch, H heads, G kv heads, N queries, S keys, d head dim, dv value dim,
Bc keys per tile. Query blocks are independent, so all of them are processed at once: the only
Python loop is over the Tc key/value tiles (Algorithm 1's outer loop).

Variants:
- ``fa2`` (FlashAttention-2, Dao 2023, Algorithm 1): keep the unnormalized accumulator O and the
  running (m, l); rescale by alpha = exp(m_old - m_new) at every tile; divide by l once at the end.
- ``fa1`` (FlashAttention, Dao et al. 2022, Algorithm 1 lines 9-12): per tile, block statistics
  (m~, l~), two rescale factors, and O normalized by l_new and rounded to the output format after
  every tile (it is written back to HBM).

``policy.max_shift == "qiu-yao"`` (Qiu & Yao, arXiv 2510.04212) replaces a tile's row maximum m~ by
2 m~ (m~ > 0) or 0 (m~ < 0) when more than one of the tile's scores lies within 1e-3 of it
(:func:`steps.block_max`). The shifted value is what the running m_i carries (as the paper's code
does), so m_i stays >= every score seen: no exp exceeds 1, alpha <= 1, and lse = m_i + log(l_i) is
the same log-sum-exp (the backward's recomputed P = exp(S - lse) is unchanged).
"""

from __future__ import annotations

import torch

from attnum.attention import blocks, fused, masks, steps
from attnum.attention.lowbit import fa4_steps
from attnum.attention.tiles import Tiles
from attnum.errors import AttnumInputError
from attnum.numerics.policy import Policy
from attnum.numerics.workspace import Workspace, kept

VARIANTS = ("fa1", "fa2")
NEG_INF = float("-inf")


def kv_tile_order(Tc: int, kv_order: str) -> list[int]:
    """``forward``, ``reverse``, or ``random[:SEED]`` (a seeded permutation of the tiles)."""
    if kv_order == "forward":
        return list(range(Tc))
    if kv_order == "reverse":
        return list(range(Tc - 1, -1, -1))
    if kv_order == "random" or kv_order.startswith("random:"):
        _, _, seed = kv_order.partition(":")
        try:
            g = torch.Generator().manual_seed(int(seed or 0))
        except ValueError:
            raise AttnumInputError(f"kv_order={kv_order!r} is not allowed; expected random:<integer seed>") from None
        return torch.randperm(Tc, generator=g).tolist()
    raise AttnumInputError(f"kv_order={kv_order!r} is not allowed; expected 'forward', 'reverse' or 'random[:SEED]'")


def flash_forward(
    q_BHNd: torch.Tensor,
    k_BHSd: torch.Tensor,
    v_BHSd: torch.Tensor,
    mk: masks.Masking,
    *,
    scale: float,
    policy: Policy,
    tiles: Tiles,
    variant: str = "fa2",
    kv_order: str = "forward",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward pass on carrier tensors already rounded at ``inputs`` and expanded for GQA.

    ``mk`` is the call's masking, cut here into one (N, Bc) tile per step: no N x S mask exists.
    Returns (O (B, H, N, dv) on the ``out`` grid, lse (B, H, N) float64 holding values of the ``lse``
    format, formed as kernels do: m + log(l) in the carrier, then rounded; -inf for empty rows).
    """
    B, H, N, _ = q_BHNd.shape
    # Every op outside the matmuls on one intra-op thread (the blocks run on the caller's threads): a
    # woken OpenMP team spin-waits after each op and takes the cores from the block threads.
    with steps.elementwise_single_thread():
        q_BHNd, scale = steps.prescale(q_BHNd, scale, policy)  # once for all rows (it looks at all of Q)
        rows = row_block(B, H, N, tiles.Bc, q_BHNd.device)
        kw = dict(scale=scale, policy=policy, tiles=tiles, variant=variant, kv_order=kv_order)
        if rows >= N:
            return _rows_forward(q_BHNd, k_BHSd, v_BHSd, mk, 0, N, **kw)
        bounds = [(i0, min(N, i0 + rows)) for i0 in range(0, N, rows)]
        parts = blocks.map_blocks(lambda i0, i1: _rows_forward(q_BHNd[:, :, i0:i1], k_BHSd, v_BHSd, mk, i0, i1, **kw),
                                  bounds, blocks.threads_for(len(bounds), q_BHNd.device))  # same blocks for any T
        return torch.cat([o for o, _ in parts], dim=2), torch.cat([lse for _, lse in parts], dim=2)


ROW_BLOCK_ELEMS = 1 << 20  # a (B, H, rows, Bc) score tile of ~4 MB (float32): it stays in cache between passes


def row_block(B: int, H: int, N: int, Bc: int, device) -> int:
    """Query rows per block on the CPU, a function of the shape alone: rows are independent (each row's
    arithmetic depends on Bc and the tile order), blocks keep a tile's matmuls and passes in cache
    (measured 2x faster matmuls at B=1 H=8 N=4096 Bc=512) and are the unit of parallelism
    (:mod:`attnum.attention.blocks`). The BLAS sums an fp32 dot product in its own order, which may
    depend on the matrix shape: at small d a row's scores can differ in the last bit from an unblocked
    call (never with the thread count). The whole of N off the CPU."""
    if torch.device(device).type != "cpu":
        return max(1, N)
    return max(1, min(N, ROW_BLOCK_ELEMS // max(1, B * H * Bc)))


def _rows_forward(q_BHnd, k_BHSd, v_BHSd, mk, i0: int, i1: int, *, scale: float, policy: Policy, tiles: Tiles,
                  variant: str, kv_order: str):
    """The tile loop (Algorithm 1's inner loop) for query rows [i0, i1) of the call; (O, lse) of those rows."""
    B, H, n, _ = q_BHnd.shape
    S, dv = v_BHSd.shape[-2], v_BHSd.shape[-1]
    c, dev = q_BHnd.dtype, q_BHnd.device
    m = torch.full((B, H, n, 1), NEG_INF, dtype=c, device=dev)  # running max m_i
    l = torch.zeros((B, H, n, 1), dtype=c, device=dev)  # running sum l_i
    o = torch.zeros((B, H, n, dv), dtype=c, device=dev)  # O_i (acc for fa2)
    ws = kept() if dev.type == "cpu" else Workspace()  # buffers reused across calls (workspace.kept)
    fuse = fused.why_unfused(policy, dev) is None  # the compiled passes (same bits; fused.UNFUSED)
    with steps.elementwise_single_thread():
        for j in kv_tile_order(tiles.Tc(S), kv_order):
            j0, j1 = j * tiles.Bc, min(S, (j + 1) * tiles.Bc)
            buf = ws.get("scores", (B, H, n, j1 - j0), c, dev)
            tile = mk.tile(i0, i1, j0, j1, c, dev)
            if fuse:
                step = fused.fa2_step if variant == "fa2" else fused.fa1_step
                m, l, o = step(q_BHnd, k_BHSd[:, :, j0:j1], v_BHSd[:, :, j0:j1], tile, scale, m, l, o, policy, ws, buf)
                continue
            s = steps.scores(q_BHnd, k_BHSd[:, :, j0:j1], scale, tile, policy, out=buf, ws=ws)  # S_ij (B, H, n, Bc)
            if variant == "fa2":
                m, l, o = _fa2_step(s, v_BHSd[:, :, j0:j1], m, l, o, policy, ws)
            else:
                m, l, o = _fa1_step(s, v_BHSd[:, :, j0:j1], m, l, o, policy, ws)
    if variant == "fa2":
        o = _normalize(o, l, policy)
    lse = policy.round("lse", m + torch.log(l)).double().squeeze(-1)
    return policy.round("out", o), lse


def _fa2_step(s, v_j, m, l, acc, policy: Policy, ws: Workspace):
    m_new = torch.maximum(m, steps.block_max(s, policy))  # line 9 (a Qiu-Yao shift carries on)
    if policy.rescale_threshold is not None:  # FA4: keep the old maximum unless it grew past the threshold
        m_new = fa4_steps.lazy_max(m, m_new, policy.rescale_threshold)
    m_safe = steps.safe_max(m_new)
    if policy.exp2 != "native":
        p = policy.round("exp", fa4_steps.exp_poly(s, m_safe, policy.exp2).to(s.dtype))  # P~_ij by FA4's exp2
    else:
        p = steps.round_site_(policy, "exp", steps.exp_shifted_(s, m_safe), ws)  # P~_ij
    alpha = policy.round("rescale", torch.exp(m - m_safe))  # e^{m_old - m_new}
    l = policy.round("row_sum", policy.round("row_sum", alpha * l) + policy.round("row_sum", p.sum(-1, keepdim=True)))
    if steps.mma_accumulates(policy):  # O is the P V MMA's accumulator (FA2/FA3's rescale_o, then gemm)
        return m_new, l, steps.pv_onto(acc, alpha, p, v_j, policy, ws, p_grid=policy.exp)
    if policy.acc_update == "once":  # O alpha + P V in fp32, rounded at acc once
        return m_new, l, steps.acc_once(acc, alpha, p, v_j, policy, p_grid=policy.exp)
    pv = steps.pv(p, v_j, policy, ws, p_grid=policy.exp)
    acc = policy.round("acc", policy.round("acc", acc.mul_(alpha)).add_(pv))  # acc is this loop's own
    return m_new, l, acc


def _fa1_step(s, v_j, m, l, o, policy: Policy, ws: Workspace):
    m_blk = steps.block_max(s, policy)  # m~_ij (or its Qiu-Yao shift)
    p = steps.round_site_(policy, "exp", steps.exp_shifted_(s, steps.safe_max(m_blk)), ws)  # P~_ij
    l_blk = policy.round("row_sum", p.sum(-1, keepdim=True))  # l~_ij
    m_new = torch.maximum(m, m_blk)
    m_safe = steps.safe_max(m_new)
    alpha = policy.round("rescale", torch.exp(m - m_safe))  # e^{m_i - m_i^new}
    beta = policy.round("rescale", torch.exp(m_blk - m_safe))  # e^{m~_ij - m_i^new}
    l_new = policy.round("row_sum", policy.round("row_sum", alpha * l) + policy.round("row_sum", beta * l_blk))
    num = policy.round("acc", (l * alpha) * o) + policy.round("acc", beta * steps.pv(p, v_j, policy, ws, p_grid=policy.exp))
    o = steps.zero_empty_rows_(num / l_new, l_new)
    return m_new, l_new, policy.round("out", o)  # O_i written back to HBM in the output format


def _normalize(acc, l, policy: Policy):
    """O = acc / l (``divide``) or acc * (1 / l) (``reciprocal``, as FA2 and torch's CPU kernel)."""
    if policy.normalize == "reciprocal":
        inv = policy.round("row_sum", 1.0 / l)
        o = acc * inv
    else:
        o = acc / l
    return steps.zero_empty_rows_(o, l)
