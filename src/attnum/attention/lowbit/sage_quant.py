"""SageAttention's quantizers: Q/K scale groups, smoothing, and the P/V formats of the P V product.

Shape alphabet: B batch, H heads, N queries, S keys, d head dim, dv value dim, n tokens (N or S).
Tensors are float64 holding the kernel's values (fp32 scales and products, integers, FP8/FP4 grid
values); every rounding is :func:`attnum.round_to` at the site named in its comment.
"""

from __future__ import annotations

import torch

from attnum.attention.lowbit.qformats import _INT_GRID
from attnum.errors import bad_value
from attnum.numerics.formats import get_format, torch_dtype
from attnum.numerics.lowbit import ACC_ARCHES, INT_MAX, LowBit
from attnum.numerics.mx import BlockFormat, block_quantize, get_block_format
from attnum.numerics.rounding import round_to

LOG2E32 = 1.44269504  # the kernels' literal (sm_scale * 1.44269504), rounded to fp32 where used
THREAD_EPS = 1e-7  # quant_per_thread.py adds 0.0000001 to every scale


def f32(x: torch.Tensor) -> torch.Tensor:
    return round_to(x, "fp32")


def group_ids(n: int, lb: LowBit, side: str) -> tuple[torch.Tensor, int]:
    """(group index of each of n tokens, number of groups) for Q (``side='q'``) or K scales."""
    i = torch.arange(n)
    g = lb.granularity
    if g == "tensor":
        ids = torch.zeros_like(i)
    elif g == "token":
        ids = i
    elif side == "k":  # K: per block for block, warp and thread (WARPK = BLKK), thread: 4 groups a block
        ids = i // lb.block_k if g != "thread" else (i // lb.block_k) * 4 + (i % 8) // 2
    elif g == "block":
        ids = i // lb.block_q
    elif g == "warp":
        ids = i // lb.warp_q
    else:  # thread: 8 groups in each warp segment, i mod 8
        ids = (i // lb.warp_q) * 8 + i % 8
    uniq, ids = torch.unique(ids, return_inverse=True)
    return ids, int(uniq.numel())


def _group_amax(x_BHnd: torch.Tensor, ids: torch.Tensor, groups: int) -> torch.Tensor:
    """amax of |x| over each group's tokens and all channels -> (B, H, groups)."""
    B, H, n, _ = x_BHnd.shape
    tok = x_BHnd.abs().amax(dim=-1)
    out = torch.zeros(B, H, groups, dtype=x_BHnd.dtype, device=x_BHnd.device)
    return out.scatter_reduce_(-1, ids.to(x_BHnd.device).expand(B, H, n), tok, reduce="amax", include_self=True)


def round_half_away(y: torch.Tensor) -> torch.Tensor:
    """trunc(fl32(y + 0.5 * sign(y))): the kernels' ``x += 0.5 * where(x >= 0, 1, -1); x.to(int8)``."""
    y64 = y.double()
    half = torch.where(y64 >= 0, 0.5, -0.5).to(torch.float64)
    z = f32(y64 + half)  # site: quant (the fp32 add)
    u = _INT_GRID.smallest_subnormal  # 2**-132: float64 holds z * u exactly
    return (round_to(z * u, _INT_GRID, mode="toward_zero") / u).to(y.dtype)  # site: quant (int8 truncates)


def quantize_groups(x_BHnd: torch.Tensor, lb: LowBit, side: str, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """x (fp32 values) -> (values, per-token scales (B, H, n, 1)): int8/int4 or e4m3fn/e5m2 with
    calibrated scales amax / max per group (``lb.granularity``), x / scale in fp32."""
    ids, groups = group_ids(x_BHnd.shape[-2], lb, side)
    amax = _group_amax(x_BHnd, ids, groups)
    if fmt in INT_MAX:
        scale = f32(amax / INT_MAX[fmt])  # site: scale (fp32 division)
        if lb.granularity == "thread":
            scale = f32(scale + THREAD_EPS)  # fp32 add of the kernel's epsilon
    else:
        scale = f32(amax / get_format(fmt).max)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    tok_scale = scale.gather(-1, ids.to(scale.device).expand(*scale.shape[:2], -1)).unsqueeze(-1)
    y = f32(x_BHnd / tok_scale)  # site: quant (fp32 division)
    if fmt in INT_MAX:
        values = round_half_away(y).clamp(-INT_MAX[fmt], INT_MAX[fmt])
    else:
        values = round_to(y, fmt, saturate=True)  # site: quant
    return values, tok_scale


def quantize_blocks(x_BHnd: torch.Tensor, fmt: str | BlockFormat) -> torch.Tensor:
    """x -> its block-format dequantized values (blocks along the last dim), exact in float64."""
    fmt = get_block_format(fmt, param="qk")
    if x_BHnd.shape[-1] % fmt.block:
        raise bad_value("head_dim", x_BHnd.shape[-1], f"a multiple of {fmt.name}'s block of {fmt.block}")
    return block_quantize(x_BHnd, fmt).dequantize()


def smooth_k(k_BHSd: torch.Tensor, fmt) -> torch.Tensor:
    """k - mean_tokens(k), mean and difference rounded to the input format (torch's k.mean; k -= km)."""
    km = round_to(k_BHSd.mean(dim=-2, keepdim=True), fmt)  # site: smooth (km in the input dtype)
    return round_to(k_BHSd - km, fmt)  # site: smooth


def smooth_q(q_BHNd: torch.Tensor, lb: LowBit) -> tuple[torch.Tensor, torch.Tensor]:
    """(q - qm, qm): qm (B, H, N, d) the fp32 mean of each Q block (``block_q`` tokens), repeated per token."""
    B, H, N, d = q_BHNd.shape
    nb = -(-N // lb.block_q)
    pad = nb * lb.block_q - N
    qp = torch.cat([q_BHNd, q_BHNd.new_zeros(B, H, pad, d)], dim=-2).reshape(B, H, nb, lb.block_q, d)
    counts = torch.full((nb,), float(lb.block_q), dtype=q_BHNd.dtype)
    counts[-1] = lb.block_q - pad
    qm = f32(qp.sum(dim=-2) / counts[:, None].to(q_BHNd.device))  # site: smooth (fp32 mean)
    qm_tok = qm.repeat_interleave(lb.block_q, dim=-2)[:, :, :N]
    return f32(q_BHNd - qm_tok), qm_tok  # site: smooth


P_SCALE = {"e4m3fn": 448.0, "e5m2": 57344.0, "int8": 127.0}


def quantize_v(v_BHSd: torch.Tensor, lb: LowBit) -> tuple[torch.Tensor, torch.Tensor]:
    """(V values, per-channel scale (B, H, 1, dv)) for the P V product (scale 1 for 16-bit V)."""
    one = torch.ones(*v_BHSd.shape[:2], 1, v_BHSd.shape[-1], dtype=v_BHSd.dtype, device=v_BHSd.device)
    if lb.pv in ("fp16", "bf16"):
        return round_to(v_BHSd, lb.pv), one  # site: pv (V converted to the P V dtype)
    if lb.pv == "nvfp4":
        S = v_BHSd.shape[-2]
        if S % 16:
            raise bad_value("kv_len", S, "a multiple of 16 for NVFP4 V (blocks of 16 tokens along the P V reduction)")
        bq = block_quantize(v_BHSd.transpose(-1, -2), "nvfp4")  # site: pv (blocks of 16 tokens per channel)
        vt = (bq.values.reshape(*bq.values.shape[:-1], -1, 16) * bq.scales).reshape(bq.values.shape)
        return vt.transpose(-1, -2), one * bq.tensor_scale  # e2m1 x e4m3 values (exact in fp32); the fp32 tensor scale
    amax = v_BHSd.abs().amax(dim=-2, keepdim=True)
    qmax = INT_MAX["int8"] if lb.pv == "int8" else get_format(lb.pv).max
    scale = f32(amax / qmax)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    y = f32(v_BHSd / scale)
    vals = round_half_away(y).clamp(-127, 127) if lb.pv == "int8" else round_to(y, lb.pv, saturate=True)
    return vals, scale  # site: pv


def quantize_p(p_BHnS: torch.Tensor, lb: LowBit) -> tuple[torch.Tensor, torch.Tensor | float]:
    """P (fp32 values in [0, 1]) -> (P values for the MMA, the factor to divide the product by)."""
    if lb.pv in ("fp16", "bf16"):
        return round_to(p_BHnS, lb.pv), 1.0  # site: probs (p.to(fp16))
    if lb.pv == "nvfp4":
        if p_BHnS.shape[-1] % 16:
            raise bad_value("block_k", p_BHnS.shape[-1], "a multiple of 16 for NVFP4 P (blocks of 16 keys)")
        # SageAttention3's two-level scaling: a per-row fp32 factor maps the row max to 448 * 6, so the
        # e4m3 block scales use their whole range; then NVFP4 without a tensor scale.
        rmax = p_BHnS.amax(dim=-1, keepdim=True)
        row = f32(rmax / (448.0 * 6.0))
        row = torch.where(row > 0, row, torch.ones_like(row))  # an all-zero (or fp32-underflowing) row: P -> 0
        fmt = BlockFormat(elem="e2m1fn", block=16, scale_format="e4m3fn", name="nvfp4-p")
        pq = block_quantize(f32(p_BHnS / row), fmt).dequantize().to(p_BHnS.dtype)  # site: probs (exact in fp32)
        return pq, 1.0 / row
    s = P_SCALE[lb.pv]
    y = f32(p_BHnS * s)
    vals = round_half_away(y) if lb.pv == "int8" else round_to(y, lb.pv)  # site: probs
    return vals, s


def mma_pv(p_BHnS: torch.Tensor, v_BHSd: torch.Tensor, lb: LowBit, acc: torch.Tensor | None = None) -> torch.Tensor:
    """P V in the MMA's accumulator: ``mma_k`` products summed in the carrier (float32 in the tiled
    kernel: each product of two <= 11-bit values is exact, their sum is rounded as an fp32 adder
    would; float64 in tests), each partial added into the accumulator rounded to ``lb.acc_format``
    (site: pv_acc). ``acc``: a running accumulator to continue (one-level accumulation), else it
    starts at 0 (a tile of two-level accumulation)."""
    fmt = lb.acc_format
    if lb.pv_acc in ACC_ARCHES:  # the architecture's MMA instructions (values exact in the pv dtype)
        from attnum.numerics.mma import dense as mma

        dt = torch_dtype(lb.pv)
        out = mma.matmul(p_BHnS.to(dt), v_BHSd.to(dt), None if acc is None else acc.float(), arch=lb.pv_acc)
        return out.to(p_BHnS.dtype)
    if lb.pv == "int8" and acc is None:
        return p_BHnS @ v_BHSd  # int8 x int8 into int32: exact (127 * 127 * Bc < 2**24 in fp32)
    if fmt.name == "fp32" and acc is None:
        return f32(p_BHnS @ v_BHSd)  # fp32 accumulation, one rounding: the chunk order is not modelled
    k = lb.mma_k
    for c0 in range(0, p_BHnS.shape[-1], k):
        part = p_BHnS[..., c0:c0 + k] @ v_BHSd[..., c0:c0 + k, :]
        acc = part if acc is None else acc + part
        acc = round_to(acc, fmt)  # site: pv_acc
    return acc
