"""The low-bit study: structured inputs, the table's orderings logic, the family's point, the CLI's bad input."""

from __future__ import annotations

import math

import pytest
import torch

from attnum.errors import AttnumInputError
from attnum.studies.lowbit.point import LowbitPoint
from attnum.studies.lowbit.table import ORDERINGS, mechanisms, metrics, orderings
from attnum.workloads.inputs import InputSpec, make_qkv


def test_structured_inputs_have_their_structure():
    spec = dict(heads=2, seq_len=256, head_dim=32, seed=1)
    _, k, _ = make_qkv(InputSpec(**spec, dist="kbias"))
    mu = k.mean(dim=-2)
    assert float(mu.pow(2).mean().sqrt()) > 2.0  # the per-channel bias dominates (N(0,1) tokens: ~1/16)
    q, k, v = make_qkv(InputSpec(**spec, dist="sink"))
    s = q @ k.transpose(-1, -2)
    assert float((s.argmax(-1) == 0).double().mean()) > 0.9 and float(v[:, :, 0].abs().max()) < 1
    q, k, _ = make_qkv(InputSpec(**spec, dist="massive"))
    assert float(q[:, :, 0].abs().max()) == 100.0 and float(k[:, :, 0].abs().max()) == 100.0
    assert make_qkv(InputSpec(**spec, dist="kbias"))[1].equal(make_qkv(InputSpec(**spec, dist="kbias"))[1])


def test_lm_capture_shape_and_bad_shape(tmp_path, monkeypatch):
    import attnum.workloads.structured as il

    monkeypatch.setenv("ATTNUM_CACHE", str(tmp_path))
    monkeypatch.setattr(il, "LM_STEPS", 2)  # the capture path, not the training length, is under test
    il._captured.cache_clear()
    q, k, v = make_qkv(InputSpec(heads=2, head_dim=64, seq_len=64, dist="lm"))
    assert q.shape == k.shape == v.shape == (1, 2, 64, 64) and bool(torch.isfinite(q).all())
    assert list(tmp_path.iterdir())  # cached for the next process
    il._captured.cache_clear()
    again = make_qkv(InputSpec(heads=2, head_dim=64, seq_len=64, dist="lm"))  # from the disk cache
    assert again[0].equal(q)
    il._captured.cache_clear()
    with pytest.raises(AttnumInputError, match=r"^heads/head_dim=\(8, 64\) is not allowed"):
        make_qkv(InputSpec(heads=8, head_dim=64, seq_len=64, dist="lm"))


def test_metrics_are_sageattentions_definitions():
    g = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64)
    o = torch.tensor([1.0, -1.5, 3.5, 0.0], dtype=torch.float64)
    m = metrics(o, g)
    assert m["cossim"] == pytest.approx(float(g @ o) / math.sqrt(float(g @ g) * float(o @ o)), rel=1e-15)
    assert m["rel_l1"] == pytest.approx(1.5 / 6.5, rel=1e-15)
    assert m["rmse"] == pytest.approx(math.sqrt(0.75 / 4), rel=1e-15)


def _rows(errs: dict[str, float], dist="x") -> list[dict]:
    return [{"dist": dist, "key": k, "cossim": 1 - e} for k, e in errs.items()]


def test_orderings_judge_each_chain():
    keys = {k for *_, chain in ORDERINGS for k in chain if k != "~"}
    good = {k: 0.01 for k in keys}
    good.update({"sa1-int8-e4m3": 0.001, "sa1-int8-int8": 0.002, "sa1-e5m2-e5m2": 0.003, "sa1-fp16-acc16": 0.001,
                 "sa1-fp16-acc32": 0.00105, "sa2-smooth-qk": 0.001, "sa2-smooth-k": 0.002, "sa2-none": 0.3,
                 "sa2-thread": 0.001, "sa2-block": 0.002, "sa2-tensor": 0.003, "sa2-pv-e4m3": 0.001,
                 "sa2-pv-e5m2": 0.002, "sa2-pv-int8": 0.2})
    bad = dict(good, **{"sa1-int8-int8": 0.0005, "sa1-fp16-acc32": 0.002})
    out = {o["claim_id"]: o for o in orderings(_rows(good, "a") + _rows(bad, "b"), ["a", "b"])}
    assert out["sa2-pv"]["verdict"] == "holds"
    assert out["sa1-pv"]["verdict"] == "mixed" and out["sa1-pv"]["fails_on"] == ["b"]
    assert out["sa1-acc"]["holds_on"] == ["a"]


def test_smoothing_fixes_channel_bias_and_the_mechanism_sees_it():
    base = dict(scheme="sage2-4b", granularity="token", pv="fp16", pv_acc="fp32", dist="kbias", seq_len=128,
                heads=1, head_dim=32)
    none = LowbitPoint(**base, smooth_k=False, smooth_q=False).run()
    smooth = LowbitPoint(**base, smooth_k=True, smooth_q=False).run()
    assert 1 - smooth["cossim"] < 0.5 * (1 - none["cossim"])
    q, k, v = make_qkv(InputSpec(heads=1, seq_len=128, head_dim=32, dist="kbias"))
    m = mechanisms(q, k, v, causal=False)
    assert m["k_channel_bias"] > 1 > 0.5 > m["q_channel_bias"]
    assert 0 <= m["p_mass_below_int8_half_step"] <= m["p_below_int8_half_step"] <= 1


@pytest.mark.parametrize("kwargs, match", [
    (dict(scheme="fa2", granularity="thread"), r"granularity needs a sage policy"),
    (dict(scheme="sage1", rescale_threshold=0), r"^rescale_threshold=0 is not allowed"),
    (dict(scheme="sage9"), r"^scheme='sage9' is not allowed"),
    (dict(scheme="sage1", granularity="warp", dist="kbias", block_k=0), r"^block_k=0 is not allowed"),
])
def test_point_bad_input(kwargs, match):
    with pytest.raises(AttnumInputError, match=match):
        LowbitPoint(**kwargs)


def test_point_runs_and_names_its_policy():
    p = LowbitPoint(scheme="sage2-4b", granularity="token", smooth_q=False, seq_len=128, head_dim=32)
    assert p.policy_spec() == "sage2-4b:fp16,granularity=token,smooth_q=0"
    out = p.run()
    assert 0.5 < out["cossim"] < 1 and out["rmse"] > 0


@pytest.mark.parametrize("args, first", [
    (["--format", "fp8"], "format='e4m3fn' is not allowed; expected fp16 or bf16"),
    (["--dists", "normal,weird"], "dists='normal,weird' is not allowed"),
    (["--rescale", "--thresholds", "0"], "threshold=0.0 is not allowed; expected a positive finite number"),
    (["--seq-len", "100"], "head_dim/seq_len=(64, 100) is not allowed"),
])
def test_cli_bad_input_one_line_exit_2(args, first, capsys):
    from attnum.cli import main

    assert main(["lowbit-table", *args]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and first in lines[0] and "Traceback" not in err


def test_render_prints_published_beside_measured_and_the_why():
    from attnum.studies.lowbit.cli import render
    from attnum.studies.lowbit.table import SETTINGS, explain

    rows = [{"dist": "kbias", "key": key, "cossim": 0.99, "rel_l1": 0.1, "rmse": 0.01} for key, *_ in SETTINGS]
    mech = {"kbias": {"k_channel_bias": 4.0, "q_channel_bias": 0.03, "qk_peak_to_rms": 5.0,
                      "p_below_int8_half_step": 0.02, "p_mass_below_int8_half_step": 0.0015}}
    text = render({"rows": rows, "mechanisms": mech, "orderings": explain(orderings(rows, ["kbias"]), mech)})
    assert "99.94% 0.0345 0.00353" in text and "99.000% 0.1000 1.00e-02" in text
    assert "fails on: kbias [k_channel_bias 4, q_channel_bias 0.03]" in text


def test_family_report_and_findings_on_stored_rows(tmp_path):
    from attnum.studies.lowbit.family import FAMILY
    from attnum.sweep.registry import ReportContext

    rows = []
    for g, sk, sq, e in (("block", False, False, 0.1), ("block", True, True, 0.01), ("token", True, True, 0.005)):
        cfg = LowbitPoint(scheme="sage2-4b", granularity=g, smooth_k=sk, smooth_q=sq).config()
        rows.append({"status": "done", "config": cfg, "metrics": {"cossim": 1 - e, "rel_l1": e, "rmse": e}})
    for t, e in ((None, 1e-3), (8.0, 1.1e-3)):
        cfg = LowbitPoint(scheme="fa2", format="bf16", dist="normal", rescale_threshold=t).config()
        rows.append({"status": "done", "config": cfg, "metrics": {"cossim": 1.0, "rel_l1": e, "rmse": e}})
    found = FAMILY.findings(rows)
    assert [f.verdict for f in found] == ["holds"] and "0.1" in found[0].measured.replace("1.00e-01", "0.1")
    part = FAMILY.report(ReportContext(rows=rows, figures_dir=tmp_path))
    assert set(part.figures) == {"lowbit_granularity", "lowbit_rescale"}
    assert all(p.exists() for paths in part.figures.values() for p in paths) and "Low-bit" in part.sections[0]
