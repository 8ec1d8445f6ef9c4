"""A target whose serving path quantises its inputs (an FP8 KV cache, FP8 queries: attnum.audit.quantised) is judged
on the values its kernel computed with, against a baseline of its design: a kernel that does the FP8 arithmetic
right passes, one that drops a descale (vLLM 0.21.0's unified attention with FP8 queries, vllm#42080) fails. The
quantisation is checked over every e4m3fn code; the planted kernels are plain PyTorch (float64 inside); the real
one is vLLM's ``unified_attention`` on its FP8 path (slow: Triton's interpreter under the sm89 model)."""

from __future__ import annotations

import math

import pytest
import torch

from attnum.attention.lowbit.qformats import fp32_scale, per_tensor_fp8
from attnum.audit import quantised
from attnum.audit.config import AuditConfig
from attnum.audit.runner import run_audit
from attnum.kernels.serving import ServingTarget
from attnum.numerics.formats import get_format

K_SCALE, V_SCALE, Q_SCALE = 0.7, 1.6, 1.0
E4M3 = get_format("e4m3fn")


def _codes() -> torch.Tensor:
    """Every finite e4m3fn value, float64."""
    x = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double()
    return x[torch.isfinite(x)]


def test_the_cache_holds_every_fp8_code_times_its_scale_exactly_and_clamps_beyond():
    s = fp32_scale(K_SCALE)
    grid = _codes() * s  # what a cache of scale 0.7 can hold
    assert torch.equal(quantised.dequantised(grid, "e4m3fn", K_SCALE), grid)  # stored and read back unchanged
    top = E4M3.max * s
    beyond = torch.tensor([top * 1.34, -top * 22, math.inf, -math.inf, math.nan], dtype=torch.float64)
    got = quantised.dequantised(beyond, "e4m3fn", K_SCALE)
    assert got[:4].tolist() == [top, -top, top, -top] and math.isnan(got[4])  # saturating, NaN kept


def test_received_values_per_declaration():
    q, k, v = (torch.randn(1, 2, 5, 8, dtype=torch.float64).to(torch.bfloat16) for _ in range(3))
    fp8 = ServingTarget("t", sdpa=lambda *a, **kw: None, kv_cache_dtype="e4m3fn", k_scale=K_SCALE, v_scale=V_SCALE,
                        q_scale=Q_SCALE)
    cache = ServingTarget("t", sdpa=lambda *a, **kw: None, kv_cache_dtype="e4m3fn", k_scale=K_SCALE, v_scale=V_SCALE)
    plain = ServingTarget("t", sdpa=lambda *a, **kw: None)
    bf16 = get_format("bf16")
    assert quantised.received(plain, bf16, q, k, v) == (q, k, v)
    rq, rk, rv = quantised.received(fp8, bf16, q, k, v)
    assert rq.dtype == torch.float64 and torch.equal(rk, per_tensor_fp8(k, "e4m3fn", K_SCALE) * fp32_scale(K_SCALE))
    cq, ck, _ = quantised.received(cache, bf16, q, k, v)  # the kernel dequantises the cache to q's dtype
    assert cq is q and ck.dtype == torch.bfloat16 and torch.equal(ck.double(), rk.to(torch.bfloat16).double())
    with pytest.raises(Exception, match="q_scale"):
        ServingTarget("t", sdpa=lambda *a, **kw: None, q_scale=1.0)  # FP8 queries need the cache's format


def fp8_kernel(drop_descales: bool):
    """SDPA on the FP8 serving path, in float64: Q, K, V quantised at the declared scales, the scores
    dot(q8, k8) * scale * q_scale * k_scale, the output times v_scale -- or, ``drop_descales``, with k_scale and
    v_scale dropped, as vLLM <= 0.21.0's kernel did with FP8 queries."""
    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or key.shape[1] != query.shape[1]:
            raise NotImplementedError("no mask, no GQA")
        q8, k8, v8 = (per_tensor_fp8(x, "e4m3fn", s) for x, s in ((query, Q_SCALE), (key, K_SCALE), (value, V_SCALE)))
        ks, vs = (1.0, 1.0) if drop_descales else (fp32_scale(K_SCALE), fp32_scale(V_SCALE))
        sc = (1.0 / math.sqrt(query.shape[-1]) if scale is None else scale) * fp32_scale(Q_SCALE) * ks
        s = q8 @ k8.transpose(-1, -2) * sc
        if is_causal:
            N, S = s.shape[-2:]
            s = s.masked_fill(torch.ones(N, S, dtype=torch.bool).tril(S - N).logical_not(), -math.inf)
        return (torch.softmax(s, -1) @ v8 * vs).to(query.dtype)

    return ServingTarget("planted-fp8", sdpa=attention, causal_alignment="bottom_right", kv_cache_dtype="e4m3fn",
                         k_scale=K_SCALE, v_scale=V_SCALE, q_scale=Q_SCALE)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_an_fp8_kernel_is_judged_on_what_it_received_and_a_dropped_descale_fails(dtype):
    cfg = AuditConfig(dtypes=dtype, probes="scale-argument,odd-lengths", isolate=False)
    right = run_audit(cfg, fp8_kernel(False))
    assert all(r.status == "pass" for r in right.results), [(r.name, r.status, r.note) for r in right.results]
    # undeclared, the same kernel is judged on the raw inputs and fails by FP8's rounding: the declaration matters
    undeclared = ServingTarget("undeclared", sdpa=fp8_kernel(False)._sdpa, causal_alignment="bottom_right")
    assert [r.status for r in run_audit(cfg, undeclared).results] == ["fail", "fail"]
    dropped = run_audit(cfg, fp8_kernel(True))
    assert [r.status for r in dropped.results] == ["fail", "fail"], [(r.name, r.note) for r in dropped.results]


def test_a_clamping_fp8_cache_fails_kv_scale_overflow_and_passes_the_ordinary_decode_probes():
    """kv-scale-overflow judges the cache writer: its golden reads the outliers as given, its baseline the careful
    writer's cache (outliers kept), which an FP8 cache cannot hold -- a baseline of the FP8 design on it would be
    NaN and make the bound vacuous (it did: the clamp passed at 0 % of an infinite bound)."""
    from attnum.kernels.serving import reference

    attend = reference("fa2").decode

    def decode(q, k_cache, v_cache, **kw):  # the cache as the writer stores it (clamped), attnum's decode on it
        rq, rk, rv = (quantised.dequantised(x, "e4m3fn", s) for x, s in
                      ((q, Q_SCALE), (k_cache, K_SCALE), (v_cache, V_SCALE)))
        return attend(rq.to(q.dtype), rk.to(q.dtype), rv.to(q.dtype), **kw)

    fn = ServingTarget("clamping-fp8", decode=decode, kv_cache_dtype="e4m3fn", k_scale=K_SCALE, v_scale=V_SCALE,
                       q_scale=Q_SCALE)
    rows = {r.name: r for r in run_audit(AuditConfig(dtypes="bf16", probes="kv-scale-overflow,decode-causal-alignment",
                                                     isolate=False), fn).results}
    assert rows["kv-scale-overflow"].status == "fail" and math.isfinite(rows["kv-scale-overflow"].bound)
    assert rows["decode-causal-alignment"].status == "pass", rows["decode-causal-alignment"].note


@pytest.mark.slow  # Triton's interpreter
def test_vllm_unified_fp8kv_declares_vllms_fp8_path_and_passes_at_the_pinned_release():
    from _wheel_helpers import fetched_or_skip

    from attnum.kernels.registry import KERNELS

    fn = KERNELS["vllm-unified-fp8kv"].fn
    assert (fn.kv_cache_dtype, fn.k_scale, fn.v_scale, fn.q_scale) == ("e4m3fn", K_SCALE, V_SCALE, Q_SCALE)
    fetched_or_skip("vllm")
    report = run_audit(AuditConfig(target="vllm-unified-fp8kv", dtypes="bf16", probes="scale-argument,exp-overflow",
                                   arch="sm89"))
    assert report.available, report.reason
    assert [r.status for r in report.results] == ["pass", "pass"], [(r.name, r.note) for r in report.results]
