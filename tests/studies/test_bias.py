"""The biased-rounding study: update-error definitions, the tiny profile end to end, the CLI face."""

import json
import math

import pytest
import torch

from attnum.attention import flash_attention
from attnum.cli import main
from attnum.errors import AttnumInputError
from attnum.studies.training.bias import study as bias
from attnum.studies.training.bias.headline import blowup_step, headline
from attnum.studies.training.bias.sites import SiteBiasConfig, run_site_bias


def test_adam_update_is_the_step_torch_takes():
    """The manual AdamW step (used for both u_r and u_ref) equals torch.optim.AdamW's, in float64."""
    g = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(5, 3, generator=g, dtype=torch.float64))
    opt = torch.optim.AdamW([p], lr=1e-2, betas=bias.BETAS, eps=bias.EPS, weight_decay=0.0)
    for _ in range(3):
        grad = torch.randn(5, 3, generator=g, dtype=torch.float64)
        want = bias.adam_update(grad, opt.state.get(p, {}), 1e-2)
        before = p.detach().clone()
        p.grad = grad
        opt.step()
        assert torch.allclose(p.detach() - before, want, rtol=1e-12, atol=1e-15)


def test_split_gives_the_models_q_k_v_rows():
    from attnum.workloads.models import ModelConfig, SelfAttention

    torch.manual_seed(0)
    m = SelfAttention(ModelConfig(d_model=8, n_heads=2))
    x = torch.randn(1, 3, 8)
    parts = bias.split("blocks.0.attn.qkv.weight", m.qkv.weight)
    q = x @ parts["L0.q"].T + m.qkv.bias[:8]
    k = x @ parts["L0.k"].T + m.qkv.bias[8:16]
    qkv = m.qkv(x).view(1, 3, 3, 2, 4)
    assert torch.allclose(q, qkv[:, :, 0].reshape(1, 3, 8)) and torch.allclose(k, qkv[:, :, 1].reshape(1, 3, 8))
    assert list(bias.split("blocks.1.attn.proj.weight", m.proj.weight)) == ["L1.o"]


def test_blowup_rule():
    flat = [2.0] * 100
    assert blowup_step(flat) is None
    assert blowup_step(flat[:50] + [math.nan] + flat[:49]) == 51
    assert blowup_step(flat[:60] + [9.0] * 40) is not None  # sustained: the 25-step mean rises
    assert blowup_step(flat[:60] + [9.0] + flat[:39]) is None  # one noisy batch is not a blow-up


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("bias")
    summary = bias.run_bias(bias.BiasConfig(profile="bias-tiny", out=out), log=lambda *_: None, progress=False)
    return out, summary


def test_tiny_profile_end_to_end(tiny):
    out, s = tiny
    runs = s["runs"]
    assert set(runs) == set(bias.RUNS)
    # same init, same first batch, same fp32 attention: the reference loss at step 0 is the fp32 run's
    assert all(r["loss_ref"][0] == runs["fp32"]["loss"][0] for r in runs.values())
    assert all(v == 0.0 for vals in runs["fp32"]["update_rel"].values() for v in vals)  # its own reference
    assert all(max(vals[1:]) > 0 for vals in runs["uniform-bf16"]["update_rel"].values())
    assert len(runs["fp32"]["sigma"]) == 4 * 2  # W_q, W_k, W_v, W_o per layer
    assert runs["fp32"]["log_steps"] == [0, 2, 4, 6]
    saved = json.loads((out / "results.json").read_text())
    assert saved["headline"]["lines"] == s["headline"]["lines"]
    page = (out / "index.html").read_text()
    assert page.count('<img class="figure"') == 3 and "Headline" in page and "delta" in page
    # the headline quotes the data it was computed from
    assert f"uniform-bf16 {s['headline']['runs']['uniform-bf16']['update_bias']:+.3f}" in s["headline"]["lines"][1]


def test_update_metrics_see_a_planted_bias(monkeypatch):
    """An attention whose output is 1/64 too large in magnitude must show as a positive W_o gradient
    bias (dL/dW_o = delta O^T inherits the scaling), where bf16 rounding shows near zero."""
    def inflated(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return flash_attention(q, k, v, is_causal=is_causal, policy="fp32", block_k=4) * (1 + 2.0 ** -6)

    monkeypatch.setitem(bias.RUNS, "inflated", inflated)
    cfg = bias.BiasConfig(profile="bias-tiny", runs=("fp32", "inflated"))
    rec = bias.train_run(cfg, "inflated", log=None)
    o_bias = [v for k, vals in rec["grad_bias"].items() if k.endswith(".o") for v in vals[1:]]
    assert min(o_bias) > 0.5, o_bias
    h = headline({"fp32": bias.train_run(cfg, "fp32", log=None), "inflated": rec}, cfg.steps)
    assert h["runs"]["inflated"]["grad_bias"] > 0


def test_site_bias_reports_every_rounding_site():
    r = run_site_bias(SiteBiasConfig(seq_len=24, head_dim=8, block_k=8, causal=False))
    none = r["runs"]["none"]
    assert set(none) == {"full", "floor", "scores", "exp", "probs", "row_sum", "rescale", "acc", "out"}
    assert all(set(v) == {"o", "dq", "dk", "dv", "delta"} for v in none.values())
    assert none["floor"]["o"]["rel_mean_abs"] < 1e-5 < none["full"]["o"]["rel_mean_abs"]  # fp32 floor vs bf16
    assert r["ties"]["tile"]["near_fraction"] > 0.9
    fa2 = run_site_bias(SiteBiasConfig(policy="fa2:bf16", seq_len=24, head_dim=8, block_k=8, causal=False))
    assert set(fa2["runs"]["none"]) == {"full", "floor", "probs", "out"}  # the only bf16 sites of fa2:bf16


def test_config_and_cli_errors(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out is relative: never leave runs/diverge in the checkout
    with pytest.raises(AttnumInputError, match="runs="):
        bias.BiasConfig(runs=("uniform-bf16",))  # the fp32 reference is required
    with pytest.raises(AttnumInputError, match="data="):
        bias.BiasConfig(data="images")
    assert main(["diverge", "--workload", "digits", "--profile", "bias"]) == 2
    assert "workload='digits' is not allowed" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # a rejected command leaves no folder and no attnum.lock


def test_cli_runs_the_tiny_profile(tmp_path, capsys):
    code = main(["diverge", "--workload", "lm", "--profile", "bias-tiny", "--steps", "2", "--out", str(tmp_path),
                 "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["headline"]["lines"]
    assert (tmp_path / "index.html").exists()


def test_max_shift_policy_name_reaches_training():
    """--attention flash:uniform:bf16,max_shift=qiu-yao resolves through the registry to the fix."""
    from attnum.kernels.registry import require

    fn = require("flash:uniform:bf16,max_shift=qiu-yao", "cpu", block_k=4).fn
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 8, 4, generator=g)
    k = q.repeat(1, 1, 1, 1)  # q . k_i is largest at i and tied across the duplicated keys below
    k = torch.cat([k[:, :, :4], k[:, :, :4]], dim=2)
    v = torch.randn(1, 1, 8, 4, generator=g)
    plain = require("flash:uniform:bf16", "cpu", block_k=8).fn(q, k, v)
    assert not torch.equal(require("flash:uniform:bf16,max_shift=qiu-yao", "cpu", block_k=8).fn(q, k, v), plain)
    assert fn(q, k, v).shape == plain.shape
