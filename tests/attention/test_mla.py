"""MLA: explicit and absorbed paths against float64, the latent caches, bad ranks."""

import math

import pytest
import torch

from attnum import golden_attention, round_to
from attnum.attention.lowbit.quant import Quantization, quantize
from attnum.attention.serving.mla import cache_latent, check_rank, mla_attention, mla_golden
from attnum.errors import AttnumInputError

U64 = 2.0**-53


def gamma(n):
    return n * U64 / (1 - n * U64)


def mla_inputs(B=1, H=4, N=3, S=70, r=32, dn=16, dr=8, dv=16, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)

    def t(*shape, std=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    return (t(B, H, N, dn), t(B, H, N, dr), t(B, S, r), t(B, S, dr), t(H, r, dn, std=r**-0.5),
            t(H, r, dv, std=r**-0.5))


@pytest.mark.parametrize("case", [dict(), dict(B=2, H=2, N=5, S=33, r=24, causal=True), dict(N=1, S=1)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fp64_explicit_equals_absorbed_to_float64_rounding(case, dtype):
    case = dict(case)
    causal = case.pop("causal", False)
    qn, qr, c, kr, wk, wv = mla_inputs(**case, dtype=dtype)
    dn, dr, r, S = qn.shape[-1], qr.shape[-1], c.shape[-1], c.shape[1]
    kw = dict(cache="fp64", policy="fp64", is_causal=causal)
    exp_ = mla_attention(qn, qr, c, kr, wk, wv, absorbed=False, **kw)
    absb = mla_attention(qn, qr, c, kr, wk, wv, absorbed=True, **kw)
    gold = mla_golden(qn, qr, c, kr, wk, wv, is_causal=causal)
    # scores: each path's re-association of q_nope W_UK^T c^T differs from exact by gamma * |q||W||c|
    scale = 1 / math.sqrt(dn + dr)
    a = lambda x: x.double().abs()  # noqa: E731
    mag = (a(qn) @ a(wk)[None].transpose(-1, -2)) @ a(c)[:, None].transpose(-1, -2) + a(qr) @ a(kr)[:, None].transpose(-1, -2)
    delta = (2 * scale * gamma(r + dn + dr + 2) * mag)
    if causal:
        delta = delta.masked_fill(~torch.ones(qn.shape[2], S, dtype=torch.bool).tril(S - qn.shape[2]), 0)
    delta = delta.amax(-1, keepdim=True)
    # outputs: softmax perturbation by exp(2 delta), the P V / (P c) W_UV re-association, float64 softmax
    q_full = torch.cat([qn.double(), qr.double()], -1)
    k_full = torch.cat([c.double()[:, None] @ wk.double()[None], kr.double()[:, None].expand(-1, qn.shape[1], -1, -1)], -1)
    m = golden_attention(q_full, k_full, a(c)[:, None].expand(-1, qn.shape[1], -1, -1), scale=scale, is_causal=causal,
                         causal_alignment="bottom_right") @ a(wv)[None]
    tol = (torch.exp(2 * delta) * (1 + gamma(S + 4)) ** 2 - 1 + 2 * gamma(S + r + 4)) * m
    for got in (exp_, absb):
        assert torch.all((got - gold).abs() <= tol)
    assert torch.all((exp_ - absb).abs() <= 2 * tol)
    # the bound is tight enough to see the absorbed path with the heads' W_UV swapped
    swapped = mla_attention(qn, qr, c, kr, wk, wv.flip(0), absorbed=True, **kw)
    assert qn.shape[1] == 1 or not torch.all((swapped - gold).abs() <= tol)


def test_bf16_paths_round_each_materialized_tensor():
    """Every output of the bf16 paths is a bf16 value, and the two rounding orders give different bits."""
    qn, qr, c, kr, wk, wv = mla_inputs(S=200, r=64)
    outs = [mla_attention(qn, qr, c, kr, wk, wv, absorbed=a) for a in (False, True)]
    for o in outs:
        assert torch.equal(o, round_to(o, "bf16"))
    assert not torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("absorbed", [False, True])
def test_quantized_cache_is_the_bf16_path_on_the_dequantized_latent(absorbed):
    qn, qr, c, kr, wk, wv = mla_inputs(S=90, r=32)
    cfg = Quantization(fmt="e4m3fn", granularity="token")
    deq = quantize(c[:, None], cfg).dequantize("bf16")[:, 0]
    got, over = mla_attention(qn, qr, c, kr, wk, wv, absorbed=absorbed, cache=cfg, return_overflow=True)
    assert over == 0
    assert torch.equal(got, mla_attention(qn, qr, deq, kr, wk, wv, absorbed=absorbed, cache="bf16"))


def test_fp8_ds_mla_cache_has_one_scale_per_token_per_128_channels():
    c = torch.randn(2, 40, 256, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    c[:, :, 128:] *= 50  # the second group's scales are 50x the first's
    got, over = cache_latent(c, "fp8_ds_mla", "bf16")
    for g0 in (0, 128):
        part = quantize(c[:, None, :, g0:g0 + 128], Quantization(fmt="e4m3fn", granularity="token"))
        assert torch.equal(got[:, :, g0:g0 + 128], part.dequantize("bf16")[:, 0])
    assert over == 0


@pytest.mark.parametrize("rank", [0, -3, 65, 2.5, True])
def test_bad_rank(rank):
    with pytest.raises(AttnumInputError, match="mla_rank="):
        check_rank(rank, 4, 16)


def test_bad_shapes_and_caches():
    qn, qr, c, kr, wk, wv = mla_inputs(H=2, dn=8, r=24)
    with pytest.raises(AttnumInputError, match="mla_rank=24"):  # 24 > H * dn = 16
        mla_attention(qn, qr, c, kr, wk, wv)
    qn, qr, c, kr, wk, wv = mla_inputs(r=32)
    with pytest.raises(AttnumInputError, match="w_uk.shape"):
        mla_attention(qn, qr, c, kr, wk[:, :-1], wv)
    with pytest.raises(AttnumInputError, match="mla_rank=32"):
        mla_attention(qn, qr, c, kr, wk, wv, cache="fp8_ds_mla")
    with pytest.raises(AttnumInputError, match="cache="):
        mla_attention(qn, qr, c, kr, wk, wv, cache="e4m3fn")


def test_mla_table_rows():
    from attnum.numerics.metrics import deviation
    from attnum.studies.serving.mla_table import CACHES, MLATableConfig, mla_inputs, run_mla_table

    cfg = MLATableConfig(heads=2, kv_len=40, rank=128, nope_dim=64, rope_dim=16, v_dim=32)
    rows = run_mla_table(cfg)
    assert len(rows) == 2 * len(CACHES) and [r["path"] for r in rows[:2]] == ["explicit", "absorbed"]
    args = mla_inputs(cfg)
    gold = mla_golden(*args, is_causal=True)
    ds = [r for r in rows if r["cache"].startswith("fp8_ds_mla")]
    assert ds[1]["rmse"] == deviation(mla_attention(*args, absorbed=True, cache="fp8_ds_mla", is_causal=True), gold)["rmse"]
    assert ds[0]["cache_bytes_per_token"] == 128 + 2 * 16 + 4 and rows[0]["cache_bytes_per_token"] == (128 + 16) * 2
    assert rows[0]["vs_explicit_rmse"] is None and rows[1]["vs_explicit_rmse"] > 0
