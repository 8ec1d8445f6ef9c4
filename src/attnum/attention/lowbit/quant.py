"""FlashAttention-3-style FP8 attention on quantized Q, K, V (the formats and scales are in
:mod:`attnum.attention.lowbit.qformats`; their names are re-exported here so existing imports keep working).

Shape alphabet: B batch, H query heads, N queries, S keys, d head dim, dv value dim.
"""

from __future__ import annotations

import math

import torch

from attnum.attention import masks, steps
from attnum.attention.baseline import baseline_attention
from attnum.attention.flash import kv_tile_order
from attnum.attention.lowbit.qformats import (  # noqa: F401  (re-exported: attnum.attention.lowbit.quant is the old home)
    _FP32,
    _INT_GRID,
    FORMATS,
    GRANULARITIES,
    INT8_MAX,
    KV_CACHE_DTYPES,
    Quantization,
    Quantized,
    QuantizedKVCache,
    format_max,
    kv_cache_quantization,
    parse_scale,
    quant_format,
    quantize,
    quantize_kv_cache,
    random_hadamard,
    rotate,
)
from attnum.errors import bad_value
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.policy import Policy
from attnum.numerics.rounding import round_to

# "+8.0 offset, 256x row_sum compensation"): P~ = 2**8 exp(s - m) lies in [0, 256], so small
# probabilities stay clear of e4m3's subnormals; the factor cancels in O = acc / l.
FA3_P_SCALE = 256.0
FP8_GRANULARITIES = ("tensor", "head", "block")


def fp8_policy(fmt: str, out: str | FloatFormat = "bf16", softmax: str | FloatFormat = "fp32",
               mma: str | None = None) -> Policy:
    """The sites of FP8 attention: Q, K, V and P in ``fmt``; the GEMMs accumulate in fp32 (or, with
    ``mma``, as that architecture's tensor cores: ``sm90`` is Hopper's FP8 wgmma); scores,
    exponentials, statistics and the accumulator in ``softmax`` (fp32 in FA3); output in ``out``."""
    w = get_format(softmax)
    name = f"fp8:{fmt},softmax={w.name}" + (f",mma={mma}" if mma else "")
    return Policy(inputs=fmt, scores=w, exp=w, probs=fmt, row_sum=w, rescale=w, acc="fp32", out="fp32",
                  matmul_acc="fp32", normalize="reciprocal", mma=mma, name=name)


@steps.no_autocast
def fp8_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    fmt: str = "e4m3fn",
    granularity: str = "block",
    block: int = 128,
    incoherent: bool = True,
    seed: int = 0,
    p_scale: float = FA3_P_SCALE,
    kv_order: str = "forward",
    out: str | FloatFormat = "bf16",
    saturate: bool = False,
    return_stats: bool = False,
    mma: str | None = None,
):
    """FlashAttention-3's FP8 forward (Shah et al. 2024, Sec. 3.3) -> (B, H, N, dv) float32 on ``out``'s grid.

    1. Incoherent processing (``incoherent``): Q and K times one random Hadamard R (seeded), in float64.
    2. Q, K, V quantized to ``fmt`` with calibrated fp32 scales per ``granularity``; ``block`` is
       both the quantization block and the tile (Br = Bc), as in FA3's block quantization.
    3. Per KV tile (online softmax, FA2 Algorithm 1): S = (Q8 K8^T accumulated in fp32) times the
       descale ``scale * q_scale * k_scale`` (fp32); m, P = exp(S - m), l, alpha in fp32;
       P cast to ``fmt`` as round(P * p_scale) for the P V GEMM (fp32 accumulation), whose
       result is multiplied by v_scale / p_scale.
    4. O = acc * (1 / l), rounded to ``out`` (bf16).
    ``return_stats``: also a dict with each input's overflow count and how many non-zero P
    underflowed to 0 in ``fmt`` (the P-collapse of arXiv 2606.06521).
    ``mma`` (e.g. ``sm90``): both GEMMs as that architecture's tensor-core instructions
    (:mod:`attnum.numerics.mma.sites`). With one V scale for every tile (``tensor`` / ``head``) O is then
    the P V instruction's accumulator across all tiles, as in FA3 (``flash::gemm`` onto ``tOrO`` after
    ``rescale_o``), and v_scale / p_scale is applied once at the end; with per-tile V scales (``block``)
    each tile's product starts from zero and is scaled and added in fp32.
    """
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    if granularity not in FP8_GRANULARITIES:
        raise bad_value("granularity", granularity, f"one of {FP8_GRANULARITIES} (per-token V scales would vary "
                        "along the P V reduction; use block)")
    cfg = _fp8_config(fmt, granularity, block, saturate)
    if not (isinstance(p_scale, (int, float)) and math.isfinite(p_scale) and p_scale > 0):
        raise bad_value("p_scale", p_scale, "a positive finite number (FA3: 256)")
    order = kv_tile_order(-(-S // block), kv_order)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    mk = masks.masking(attn_mask, is_causal, (B, H, N, S), causal_alignment=causal_alignment, window=window)
    q, k = _incoherent(q, k, incoherent, seed, d)
    qq, kq, vq = quantize(q, cfg), quantize(k, cfg), quantize(v, cfg)
    policy = fp8_policy(cfg.fmt, out, mma=mma)
    c, dev = torch.float32, q.device
    q8 = qq.values.to(c)
    k8, v8 = (masks.expand_kv(t.values.to(c), H) for t in (kq, vq))
    sq = qq.token_scales()  # (1|B, 1|H, 1|N, 1)
    sk, sv = (masks.expand_kv(t.token_scales(), H) for t in (kq, vq))  # (1|B, H, 1|S, 1)
    m = torch.full((B, H, N, 1), float("-inf"), dtype=c, device=dev)  # m_i
    l = torch.zeros((B, H, N, 1), dtype=c, device=dev)  # l_i
    acc = torch.zeros((B, H, N, dv), dtype=c, device=dev)  # O_i (unnormalized)
    underflow = nonzero = 0
    onto = policy.mma is not None and sv.shape[-2] == 1
    for j in order:
        j0, j1 = j * block, min(S, (j + 1) * block)
        sk_j = sk if sk.shape[-2] == 1 else sk[..., j0:j1, :]
        sv_j = sv if sv.shape[-2] == 1 else sv[..., j0:j0 + 1, :]  # one scale per tile (block == Bc)
        descale = policy.round("scores", (scale * sq) * sk_j.transpose(-1, -2)).to(c)  # softmax_scale_eff
        s = steps.matmul(q8, k8[:, :, j0:j1].transpose(-1, -2), policy).mul_(descale)  # S_ij, fp32
        s = _mask_(s, mk.tile(0, N, j0, j1, c, dev), policy)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = steps.safe_max(m_new)
        p = policy.round("exp", steps.exp_shifted_(s, m_safe))  # P~_ij
        alpha = policy.round("rescale", torch.exp(m - m_safe))
        l = policy.round("row_sum", alpha * l + p.sum(-1, keepdim=True))
        p8 = policy.round("probs", p * p_scale)  # P cast to FP8 for the GEMM
        if return_stats:
            underflow += int(((p > 0) & (p8 == 0)).sum())
            nonzero += int((p > 0).sum())
        if onto:  # O is the P V instruction's accumulator (FA3); the V descale comes at the end
            acc = steps.matmul(p8, v8[:, :, j0:j1], policy, sites=("probs", "inputs"),
                               c=policy.round("acc", acc.mul_(alpha)))
            m = m_new
            continue
        pv = steps.matmul(p8, v8[:, :, j0:j1], policy, sites=("probs", "inputs"))
        pv = pv.mul_(policy.round("acc", sv_j.to(torch.float64) / p_scale).to(c))
        acc = policy.round("acc", acc.mul_(alpha).add_(pv))
        m = m_new
    if onto:
        acc = acc.mul_(policy.round("acc", sv.to(torch.float64) / p_scale).to(c))
    o = steps.zero_empty_rows_(acc * policy.round("row_sum", 1.0 / l), l)
    o = round_to(o, out)
    if not return_stats:
        return o
    return o, {"overflow": {"q": qq.overflow, "k": kq.overflow, "v": vq.overflow},
               "p_underflow": underflow, "p_nonzero": nonzero}


@steps.no_autocast
def fp8_baseline_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    causal_alignment: str = "top_left",
    window: tuple[int, int] | None = None,
    fmt: str = "e4m3fn",
    incoherent: bool = False,
    seed: int = 0,
    softmax: str | FloatFormat = "fp32",
    out: str | FloatFormat = "bf16",
    saturate: bool = False,
    return_stats: bool = False,
    mma: str | None = None,
):
    """Baseline FP8 attention: per-tensor scales, materialized scores and softmax (the core's
    :func:`baseline_attention` on the quantized values, its scale the descale
    ``scale * q_scale * k_scale``), the normalized P cast straight to ``fmt`` for the P V GEMM
    (as FA3's FP8 test reference, ``intermediate_dtype=fp8``), O * v_scale rounded to ``out``. ``mma``: both
    GEMMs as that architecture's tensor-core instructions (the P V over all S keys in one product).
    """
    B, H, _, N, S, d, dv = masks.check_qkv(q, k, v)
    cfg = _fp8_config(fmt, "tensor", 128, saturate)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    q, k = _incoherent(q, k, incoherent, seed, d)
    qq, kq, vq = quantize(q, cfg), quantize(k, cfg), quantize(v, cfg)
    descale = float(round_to(torch.tensor(scale * qq.scales.item() * kq.scales.item(), dtype=torch.float64), _FP32))
    o = baseline_attention(qq.values.float(), kq.values.float(), vq.values.float(), attn_mask=attn_mask,
                           is_causal=is_causal, scale=descale, causal_alignment=causal_alignment, window=window,
                           policy=fp8_policy(cfg.fmt, out, softmax, mma=mma))
    o = round_to(o * vq.scales.float(), out)
    if not return_stats:
        return o
    return o, {"overflow": {"q": qq.overflow, "k": kq.overflow, "v": vq.overflow}}


def _fp8_config(fmt: str, granularity: str, block: int, saturate: bool) -> Quantization:
    cfg = Quantization(fmt=fmt, granularity=granularity, block=block, saturate=saturate)
    if cfg.fmt == "int8":
        raise bad_value("fmt", fmt, "e4m3fn or e5m2 for FP8 attention (int8 is for KV caches)")
    return cfg


def _incoherent(q, k, on: bool, seed: int, d: int):
    if not on:
        return q, k
    r = random_hadamard(d, seed)
    return rotate(q, r), rotate(k, r)


def _mask_(s: torch.Tensor, tile: masks.Tile, policy: Policy) -> torch.Tensor:
    """The tile's additive mask (rounded at ``scores``) and -inf masking, as steps.scores does."""
    if tile.additive is not None:
        s = policy.round("scores", s.add_(tile.additive))
    return masks.apply_keep_(s, tile.keep) if tile.keep is not None else s
