"""FlashAttention-2 backward (Dao 2023, Algorithm 2): recompute P tile by tile from the saved LSE.

Shape alphabet: B batch, H query heads, G key/value heads, N queries, S keys, Bc keys in one tile,
d head dim, dv value dim.

No N x S matrix is kept: for each KV tile j (the only loop) the scores S_j and probabilities
P_j = exp(S_j - lse) of *all* query rows are recomputed, used, and dropped. Every change of
precision is a named site of the forward's policy, chosen to match what FA2's CUDA backward stores:

============ ===================================================================================
inputs       dO as loaded (Q, K, V are re-rounded here; a no-op when they came from the forward)
scores       S_j = scale Q K_j^T (+ mask), recomputed; dP_j = dO V_j^T (both fp32 in FA2)
exp          P_j = exp(S_j - lse), exact-0 where the row is fully masked (lse = -inf)
probs        P_j and dS_j = P_j * (dP_j - D) as fed to the dV, dQ and dK matmuls (bf16 in FA2)
row_sum      D = rowsum(dO * O), the softmax-Jacobian correction (Algorithm 2 line 4)
acc          each tile's contribution to dQ, dK, dV and the running sums they are added into
out          dQ, dK, dV as returned (the softmax scale is applied here, as FA2 does at the end)
============ ===================================================================================

``rescale`` is unused: with the final LSE there is no running maximum to correct. For the same
reason ``max_shift`` needs no step here: P_j = exp(S_j - L) is the normalized softmax, whose entries on
a row with k >= 2 scores at the maximum are <= 1/k (never the forward's exact 1s), and a forward under
``qiu-yao`` forms L from its shifted statistics, m' + log(l') with l' = l e^(m - m'), the same L.
dK_j and dV_j sum over query blocks of ``Br`` rows in order, each partial rounded at ``acc`` (as
FA2's per-KV-tile loop over query blocks does); dQ sums over KV tiles in ``kv_order`` (the forward's ``kv_tile_order``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.attention import fused, masks, steps
from attnum.attention.flash_forward import VARIANTS, flash_forward, kv_tile_order
from attnum.attention.tiles import Tiles
from attnum.errors import AttnumInputError
from attnum.numerics.policy import Policy, parse_policy

PROBS_INPUTS = ("probs", "inputs")  # the sites a (P or dS) and b (dO, Q or K) of a backward product lie on


def _sum_query_blocks(a_BHSN: torch.Tensor, b_BHNx: torch.Tensor, Br: int | None, policy: Policy) -> torch.Tensor:
    """sum_i a[..., i-block] @ b[i-block] with every partial and the running sum rounded at ``acc``.
    ``a`` is P^T or dS^T (on the ``probs`` grid), ``b`` is dO or Q (``inputs``).

    All Tr = ceil(N / Br) partial products come from one batched matmul (rows padded with exact
    zeros); only the in-order additions, as FA2 accumulates dK_j/dV_j over query blocks, are a loop.
    """
    B, H, S, N = a_BHSN.shape
    if Br is None or Br >= N:
        return policy.round("acc", steps.matmul(a_BHSN, b_BHNx, policy, sites=PROBS_INPUTS))
    Tr = math.ceil(N / Br)
    pad = Tr * Br - N
    if pad:
        a_BHSN = torch.nn.functional.pad(a_BHSN, (0, pad))
        b_BHNx = torch.nn.functional.pad(b_BHNx, (0, 0, 0, pad))
    a_BHTSr = a_BHSN.view(B, H, S, Tr, Br).permute(0, 1, 3, 2, 4)
    b_BHTrx = b_BHNx.view(B, H, Tr, Br, b_BHNx.shape[-1])
    parts_BHTSx = policy.round("acc", steps.matmul(a_BHTSr, b_BHTrx, policy, sites=PROBS_INPUTS))
    acc = parts_BHTSx[:, :, 0]
    for i in range(1, Tr):
        acc = policy.round("acc", acc + parts_BHTSx[:, :, i])
    return acc


def flash_backward(
    q_BHNd: torch.Tensor,
    k_BGSd: torch.Tensor,
    v_BGSdv: torch.Tensor,
    out_BHNdv: torch.Tensor,
    lse_BHN: torch.Tensor,
    dout_BHNdv: torch.Tensor,
    *,
    mk: masks.Masking | None = None,
    scale: float,
    policy: str | Policy,
    Bc: int,
    Br: int | None = None,
    kv_order: str = "forward",
    return_delta: bool = False,
) -> tuple[torch.Tensor, ...]:
    """(dQ (B,H,N,d), dK (B,G,S,d), dV (B,G,S,dv)) in the policy's carrier dtype, on the ``out`` grid;
    with ``return_delta`` also D = rowsum(dO * O) (B, H, N) on the ``row_sum`` grid (the delta of
    Algorithm 2 line 4, through which the forward's error in O enters every dS).

    ``mk``: the call's masking (``masks.masking``), cut per KV tile here; ``out`` and ``lse`` are the
    forward's output and log-sum-exp (natural log). Q, K, V and dO go through the input preamble
    (a no-op for values already on the ``inputs`` grid).

    Under an ``mma`` policy every product -- S = Q K^T, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q --
    is the architecture's MMA instructions (:mod:`attnum.numerics.mma.sites`; Q, K, V, dO read on the
    ``inputs`` grid, P and dS on ``probs``). Each product starts from zero and is added at ``acc``: dQ's
    sum over KV tiles is FA2's separate fp32 adds; dK and dV over several query blocks (``Br`` < N) are
    added the same way, where a kernel that keeps them in the MMA's accumulator (C) would truncate the
    additions too (no difference with one query block).
    """
    policy = parse_policy(policy)
    if Bc < 1 or (Br is not None and Br < 1):
        raise AttnumInputError(f"Bc={Bc}, Br={Br} are not allowed; expected positive tile sizes")
    B, H, G, N, S, d, dv = masks.check_qkv(q_BHNd, k_BGSd, v_BGSdv)
    c = policy.carrier
    mk = masks.masking(None, False, (B, H, N, S)) if mk is None else mk
    q = steps.load_input(q_BHNd, policy)
    k = masks.expand_kv(steps.load_input(k_BGSd, policy), H)
    v = masks.expand_kv(steps.load_input(v_BGSdv, policy), H)
    do = steps.load_input(dout_BHNdv, policy)
    o = out_BHNdv.to(c)
    lse = lse_BHN.to(c)[..., None]
    # Fully masked rows: lse = -inf; subtracting 0 instead keeps exp(-inf) = 0 rather than NaN.
    lse = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)
    D_BHN1 = policy.round("row_sum", (do * o).sum(dim=-1, keepdim=True))  # Algorithm 2 line 4
    dq = torch.zeros(B, H, N, d, dtype=c, device=q.device)
    dk = torch.empty(B, H, S, d, dtype=c, device=q.device)
    dvv = torch.empty(B, H, S, dv, dtype=c, device=q.device)
    fuse = fused.why_unfused(policy, q.device) is None and S > 0  # compiled passes, same bits (fused.py)
    with steps.elementwise_single_thread():
        for j in kv_tile_order(max(1, math.ceil(S / Bc)), kv_order):  # Algorithm 2's outer loop (lines 6-7)
            j0, j1 = j * Bc, min(S, (j + 1) * Bc)
            k_j, v_j = k[:, :, j0:j1], v[:, :, j0:j1]
            if fuse:
                p_j, p_in, ds_j = fused.backward_tile(q, k_j, v_j, do, mk.tile(0, N, j0, j1, c, q.device), scale, lse,
                                                      D_BHN1, policy)
                dvv[:, :, j0:j1] = _sum_query_blocks(p_in.transpose(-1, -2), do, Br, policy)
                dq = fused.acc_add_(dq, steps.matmul(ds_j, k_j, policy, sites=PROBS_INPUTS), policy)
                dk[:, :, j0:j1] = _sum_query_blocks(ds_j.transpose(-1, -2), q, Br, policy)
                continue
            s_j = steps.scores(q, k_j, scale, mk.tile(0, N, j0, j1, c, q.device), policy)
            p_j = policy.round("exp", torch.exp(s_j - lse))  # line 11: P = exp(S - L)
            p_in = policy.round("probs", p_j)
            dvv[:, :, j0:j1] = _sum_query_blocks(p_in.transpose(-1, -2), do, Br, policy)  # line 12
            dp_j = policy.round("scores", steps.matmul(do, v_j.transpose(-1, -2), policy))  # line 13
            ds_j = policy.round("probs", p_j * (dp_j - D_BHN1))  # line 14
            dq = policy.round("acc", dq + policy.round("acc", steps.matmul(ds_j, k_j, policy,
                                                                           sites=PROBS_INPUTS)))  # line 15
            dk[:, :, j0:j1] = _sum_query_blocks(ds_j.transpose(-1, -2), q, Br, policy)  # line 16
    if G != H:  # GQA: a KV head's gradient is the sum over the query heads that read it
        dk = dk.view(B, G, H // G, S, d).sum(dim=2)
        dvv = dvv.view(B, G, H // G, S, dv).sum(dim=2)
    grads = (policy.round("out", dq * scale), policy.round("out", dk * scale), policy.round("out", dvv))
    return (*grads, D_BHN1.squeeze(-1)) if return_delta else grads


@dataclass(frozen=True, kw_only=True)
class FlashOptions:
    """Everything the forward and the recomputing backward share besides tensors."""

    scale: float
    policy: Policy
    tiles: Tiles
    variant: str = "fa2"
    kv_order: str = "forward"

    def __post_init__(self) -> None:
        if not (isinstance(self.scale, float) and math.isfinite(self.scale)):
            raise AttnumInputError(f"scale={self.scale!r} is not allowed; expected a finite float")
        if not isinstance(self.policy, Policy) or not isinstance(self.tiles, Tiles):
            raise AttnumInputError("policy and tiles must be a parsed Policy and a Tiles")
        if self.variant not in VARIANTS:
            raise AttnumInputError(f"variant={self.variant!r} is not allowed; expected one of {VARIANTS}")
        kv_tile_order(1, self.kv_order)  # validates the order's spelling


class FlashAttentionFunction(torch.autograd.Function):
    """Trainable re-implementation: forward saves only O and the LSE (B, H, N); backward recomputes.

    ``apply(q, k, v, mk, opts)`` -> (O (B, H, N, dv) carrier, lse (B, H, N) float64, not
    differentiable); ``mk`` is the call's ``masks.Masking``. Gradients come back in the dtypes of
    q, k, v; the mask gets none.
    """

    @staticmethod
    def forward(ctx, q, k, v, mk: masks.Masking, opts: FlashOptions):
        # Autocast would run the float32 carrier's matmuls in bf16/fp16: not the policy's arithmetic.
        with torch.autocast(device_type=q.device.type, enabled=False):
            return FlashAttentionFunction._forward(ctx, q, k, v, mk, opts)

    @staticmethod
    def _forward(ctx, q, k, v, mk: masks.Masking, opts: FlashOptions):
        attn_mask = mk.attn_mask
        if attn_mask is not None and attn_mask.requires_grad:
            # A learned additive bias would silently get no gradient: refuse instead.
            raise AttnumInputError("attn_mask.requires_grad=True is not allowed; the backward gives "
                                   "gradients for q, k and v only")
        policy = opts.policy
        H = q.shape[1]
        q_c = steps.load_input(q.detach(), policy)
        k_c = masks.expand_kv(steps.load_input(k.detach(), policy), H)
        v_c = masks.expand_kv(steps.load_input(v.detach(), policy), H)
        out, lse = flash_forward(q_c, k_c, v_c, mk, scale=opts.scale, policy=policy,
                                 tiles=opts.tiles, variant=opts.variant, kv_order=opts.kv_order)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mk = mk
        ctx.opts = opts
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        with torch.autocast(device_type=dout.device.type, enabled=False):
            return FlashAttentionFunction._backward(ctx, dout)

    @staticmethod
    def _backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        opts: FlashOptions = ctx.opts
        dq, dk, dv_ = flash_backward(q, k, v, out, lse, dout, mk=ctx.mk, scale=opts.scale,
                                     policy=opts.policy, Bc=opts.tiles.Bc, Br=opts.tiles.Br,
                                     kv_order=opts.kv_order)
        return dq.to(q.dtype), dk.to(k.dtype), dv_.to(v.dtype), None, None


def needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
