"""Workloads, runs, checkpoints and weight divergence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnum.errors import AttnumInputError
from attnum.studies.training.checkpoints import checkpoint_name, list_checkpoints, load_state, save_checkpoint
from attnum.studies.training.diverge import headline, workload_config
from attnum.studies.training.divergence import weight_divergence
from attnum.studies.training.headline import summarise
from attnum.studies.training.loop import RunConfig, train
from attnum.workloads.data import CAPTION_TEMPLATES, DigitsData, TextData, caption, shard


def test_captions_are_templated_and_four_words():
    assert caption(7, 0) == "a handwritten digit seven"
    assert all(len(t.format("x").split()) == 4 for t in CAPTION_TEMPLATES)


@pytest.mark.parametrize("name", ["digits", "lm"])
def test_batches_depend_only_on_seed_and_step(name):
    data = DigitsData.load() if name == "digits" else TextData.load()
    kw = {"diffusion_steps": 100} if name == "digits" else {"seq_len": 16}
    a = data.batch(data_seed=0, step=5, batch_size=8, **kw)
    b = data.batch(data_seed=0, step=5, batch_size=8, **kw)
    c = data.batch(data_seed=0, step=6, batch_size=8, **kw)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    halves = [shard(a, r, 2) for r in range(2)]
    assert all(torch.equal(torch.cat([h[k] for h in halves]), a[k]) for k in a)


def _run(tmp_path, **kw):
    cfg = RunConfig(**{"name": "r", "workload": workload_config("digits"), "steps": 6, "ckpt_every": 3, **kw})
    return cfg, train(cfg, tmp_path)


def test_runs_are_deterministic_and_checkpointed(tmp_path):
    _, r1 = _run(tmp_path / "a")
    _, r2 = _run(tmp_path / "b")
    assert all(torch.equal(r1.final_state[k], r2.final_state[k]) for k in r1.final_state)
    assert sorted(list_checkpoints(r1.ckpt_dir)) == [checkpoint_name(s) for s in (0, 3, 6)]
    last = load_state(r1.ckpt_dir / checkpoint_name(6))
    assert all(torch.equal(last[k], r1.final_state[k]) for k in last)
    assert len(r1.losses) == 6 and all(np.isfinite(r1.losses))


def test_seed_precision_and_attention_change_the_weights(tmp_path):
    _, base = _run(tmp_path / "base")
    _, seed = _run(tmp_path / "seed", init_seed=1)
    _, low = _run(tmp_path / "low", precision="bf16")
    _, flash = _run(tmp_path / "flash", attention="flash:fa2:bf16", block_k=8)
    step0 = lambda r: load_state(r.ckpt_dir / checkpoint_name(0))
    assert weight_divergence(step0(base), step0(flash)).max_abs == 0  # same init
    assert weight_divergence(step0(base), step0(seed)).max_abs > 0
    for other in (low, flash):
        assert weight_divergence(base.final_state, other.final_state).max_abs > 0


def test_lm_workload_trains(tmp_path):
    cfg = RunConfig(name="lm", workload=workload_config("lm"), steps=30, ckpt_every=30, lr=3e-3)
    r = train(cfg, tmp_path)
    assert np.mean(r.losses[-5:]) < np.mean(r.losses[:5])  # learns byte statistics quickly


def test_divergence_metrics_and_mismatches():
    scipy_stats = pytest.importorskip("scipy.stats")
    g = torch.Generator().manual_seed(0)
    a = {"w": torch.randn(50, 7, generator=g), "b": torch.randn(7, generator=g), "only_a": torch.zeros(3),
         "shape": torch.zeros(2, 3)}
    b = {"w": a["w"] + 1e-3 * torch.randn(50, 7, generator=g), "b": a["b"].clone(), "only_b": torch.zeros(1),
         "shape": torch.zeros(3, 2)}
    d = weight_divergence(a, b)
    assert sorted(d.per_tensor) == ["b", "w"]
    assert {m.name: m.reason for m in d.mismatches} == {
        "only_a": "only in A", "only_b": "only in B", "shape": "shape A (2, 3) vs B (3, 2)"}
    assert d.max_abs == float((a["w"].double() - b["w"].double()).abs().max())
    want = scipy_stats.wasserstein_distance(a["w"].numpy().ravel(), b["w"].numpy().ravel())
    assert d.per_tensor["w"]["w1"] == pytest.approx(want, rel=1e-9)
    flat_a = torch.cat([a["b"], a["w"].ravel()]).numpy()
    flat_b = torch.cat([b["b"], b["w"].ravel()]).numpy()
    assert d.w1 == pytest.approx(scipy_stats.wasserstein_distance(flat_a, flat_b), rel=1e-9)
    assert weight_divergence(a, a).w1 == 0 and weight_divergence(a, a).max_abs == 0


def test_ddp_prefix_is_ignored():
    s = {"w": torch.ones(2)}
    assert not weight_divergence({"module.w": torch.ones(2)}, s).mismatches


def test_torch_state_dicts_load_with_weights_only(tmp_path):
    sd = {"model": {"layer": {"weight": torch.ones(2, 2)}}, "step": 3}
    torch.save(sd, tmp_path / "ok.pt")
    assert list(load_state(tmp_path / "ok.pt")) == ["layer.weight"]


class _NotWeights:  # a pickled object that weights_only=True must refuse
    pass


def test_arbitrary_pickles_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(1), "obj": _NotWeights()}, path)
    with pytest.raises(AttnumInputError, match="evil.pt"):
        load_state(path)


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_corrupt_files_name_the_file(tmp_path, suffix):
    path = tmp_path / f"broken{suffix}"
    path.write_bytes(b"\x00\x01 not a checkpoint" * 3)
    with pytest.raises(AttnumInputError, match=f"broken{suffix}"):
        load_state(path)


def test_truncated_safetensors_names_the_file(tmp_path):
    path = tmp_path / "cut.safetensors"
    save_checkpoint({"w": torch.randn(100)}, path)
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(AttnumInputError, match="cut.safetensors"):
        load_state(path)


def test_headline_is_computed_from_the_curves():
    steps = [0, 10, 20]
    curves = {
        "flash": {"step": steps, "max_abs": [0, 1e-4, 2e-4], "w1": [0, 1e-6, 2e-6], "w1_mean": [0, 1, 2]},
        "seed": {"step": steps, "max_abs": [1, 1, 1], "w1": [1e-3, 1e-3, 1e-3], "w1_mean": [0, 1, 2]},
        "lowprec": {"step": steps, "max_abs": [0, 5e-4, 1e-3], "w1": [0, 5e-6, 1e-5], "w1_mean": [0, 1, 2]},
    }
    h = headline(curves)
    assert h["step"] == 20
    assert h["ratios"]["lowprec"]["w1"] == pytest.approx(0.2)
    assert h["ratios"]["lowprec"]["w1_rate"] == pytest.approx(0.2)
    assert h["ratios"]["seed"]["max_abs"] == pytest.approx(2e-4)
    assert "flash / low-precision W1 at step 20: 0.2" in h["lines"]
    assert np.isnan(h["ratios"]["seed"]["w1_rate"])  # a flat proxy curve has no growth rate to divide by


def _head(w1, max_abs, rate=0.5, seed_growth=0.0):
    r = {"w1": w1, "max_abs": max_abs, "w1_rate": rate, "max_abs_rate": rate, "proxy_growth": seed_growth}
    return {"step": 20, "ratios": {"seed": dict(r, w1=w1 / 10, max_abs=max_abs / 10), "lowprec": r},
            "slopes": {}, "lines": []}


def test_headline_sentence_follows_the_numbers():
    below = summarise({0: _head(0.45, 1.2), 1: _head(0.49, 2.0), 2: _head(0.47, 1.5)})
    assert below["ratios"]["lowprec"]["w1"] == {"median": 0.47, "min": 0.45, "max": 0.49, "n": 3, "nonfinite": 0}
    text = below["sentence"]
    assert text.startswith("Over 3 seeds at step 20, by W1 flash's deviation stays below the different-init")
    assert "and stays below the low-precision deviation (0.47x, seeds 0.45..0.49)" in text
    assert "by max|dW| flash's deviation stays below the different-init deviation (0.15x, seeds 0.12..0.2) and " \
           "exceeds the low-precision deviation (1.5x, seeds 1.2..2)" in text
    assert "it measures the init, not training" in text  # the different-init W1 did not move
    mixed = summarise({0: _head(0.9, 0.9, seed_growth=3.0), 1: _head(1.1, 1.1, seed_growth=3.0)})
    assert "is within the seed spread of the low-precision" in mixed["sentence"]
    assert "measures the init" not in mixed["sentence"]
    assert "not finite" not in below["sentence"]


@pytest.mark.parametrize("seeds,word", [
    # the two machines: one median 1.31 (1.13..1.87), the other 1.03 (0.87..1.55): the same words
    ((1.13, 1.31, 1.87), "is within the seed spread of"),
    ((0.87, 1.03, 1.55), "is within the seed spread of"),
    ((1.2, 1.5, 2.0), "exceeds"),  # every seed above 1, the median further from 1 than half the spread
    ((1.01, 1.6, 1.7), "exceeds"),
    ((0.36, 0.59, 0.63), "stays below"),
    ((0.70, 0.82, 1.31), "is within the seed spread of"),
    ((0.5, 0.98, 0.99), "is within the seed spread of"),  # all below 1, but by less than the seeds differ
])
def test_headline_wording_does_not_flip_within_the_seed_spread(seeds, word):
    h = summarise({i: _head(0.5, x) for i, x in enumerate(seeds)})
    assert "by max|dW| flash's deviation stays below the different-init deviation" in h["sentence"]
    clause = h["sentence"].split("by max|dW|")[1]
    assert f"and {word} the low-precision deviation ({seeds[1]:.2g}x, seeds {seeds[0]:.2g}..{seeds[2]:.2g})" in clause


def test_headline_says_how_many_seeds_were_not_finite():
    """A ratio over a zero (or NaN) divergence is left out of the median, and the headline says so."""
    h = summarise({0: _head(0.45, 1.2), 1: _head(math.nan, 2.0), 2: _head(math.inf, 1.5)})
    w1 = h["ratios"]["lowprec"]["w1"]
    assert (w1["n"], w1["nonfinite"], w1["median"]) == (1, 2, 0.45)
    assert "n=1, 2 not finite" in " ".join(h["lines"])
    assert "not finite and left out of the medians (different-init W1, low-precision W1)." in h["sentence"]


def test_attention_this_machine_cannot_run_fails_before_training(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(AttnumInputError, match="torch-sdpa-cudnn.*not available here"):
        _run(tmp_path, attention="torch-sdpa-cudnn")
    assert not (tmp_path / "r").exists()
