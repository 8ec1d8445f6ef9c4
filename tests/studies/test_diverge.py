"""`attnum diverge`: the paper's runs end to end (tiny), and the checkpoint-folder comparison."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnum.cli import main
from attnum.studies.training.checkpoints import save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow  # tens of seconds to minutes: left out of pytest -m "not slow" (README)
@pytest.mark.parametrize("workload", ["digits", "lm"])
def test_diverge_runs_write_curves_report_and_headline(tmp_path, capsys, workload):
    out = tmp_path / "dv"
    args = ["diverge", "--workload", workload, "--steps", "6", "--ckpt-every", "3", "--out", str(out),
            "--seeds", "0,1"]
    assert main(args) == 0
    text = capsys.readouterr().out
    for name in ("results.json", "index.html", "fig_w1.png", "fig_w1.svg", "fig_max_abs.png", "fig_loss.svg"):
        assert (out / name).is_file(), name
    res = json.loads((out / "results.json").read_text())
    assert set(res["runs"]) == {f"{k}-s{s}" for k in ("baseline", "flash", "lowprec") for s in (0, 1)}
    # The default pairing: flash and baseline at the same low precision, as the paper does.
    assert res["runs"]["flash-s0"]["attention"] == "flash:uniform:bf16"
    assert res["runs"]["baseline-s0"]["attention"] == "baseline:uniform:bf16"
    assert res["curves"]["0"]["seed"]["runs"] == ["baseline-s0", "baseline-s1"]
    per = []
    for seed in ("0", "1"):
        f, low = res["curves"][seed]["flash"], res["curves"][seed]["lowprec"]
        assert f["step"] == [0, 3, 6] and f["max_abs"][0] == 0  # same init and no step yet
        want = f["w1"][-1] / low["w1"][-1]
        assert res["headline"]["per_seed"][seed]["ratios"]["lowprec"]["w1"] == pytest.approx(want)
        per.append(want)
    spread = res["headline"]["ratios"]["lowprec"]["w1"]
    assert (spread["min"], spread["max"], spread["n"]) == (pytest.approx(min(per)), pytest.approx(max(per)), 2)
    assert f"flash / low-precision W1 at step 6: {spread['median']:.3g} (seeds: " in text
    assert res["headline"]["sentence"].startswith("Over 2 seeds at step 6, by W1 flash's deviation ")
    assert res["headline"]["sentence"] in text
    page = (out / "index.html").read_text()
    assert "<svg" in page and "max|dW| at the last step" in page and "Growth over steps" in page
    assert all(math.isfinite(x) for r in res["runs"].values() for x in r["losses"])
    # Resume: a finished run is reused, an interrupted one (no log yet) is trained again.
    (out / "runs" / "flash-s1" / "log.json").unlink()
    assert main(args) == 0
    again = json.loads((out / "results.json").read_text())
    assert [k for k, r in again["runs"].items() if not r["reused"]] == ["flash-s1"]
    assert again["headline"]["ratios"] == res["headline"]["ratios"]  # bit-identical retraining


def _folder(path, tensors: dict, step: int = 0):
    save_checkpoint(tensors, path / f"step_{step:06d}.safetensors")
    return path


def test_checkpoint_folders_list_mismatches_and_compare_the_rest(tmp_path, capsys):
    a = _folder(tmp_path / "A", {"w": torch.ones(3, 3), "extra": torch.ones(2), "s": torch.ones(4)})
    b = _folder(tmp_path / "B", {"w": torch.ones(3, 3) * 1.5, "s": torch.ones(2, 2)})
    _folder(a, {"w": torch.ones(3, 3)}, step=5)
    rc = main(["diverge", "--checkpoints", str(a), str(b), "--out", str(tmp_path / "o"), "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    (pair,) = res["pairs"]
    assert pair["max_abs"] == 0.5 and pair["w1"] == pytest.approx(0.5)
    assert {m["name"]: m["reason"] for m in pair["mismatches"]} == {
        "extra": "only in A", "s": "shape A (4,) vs B (2, 2)"}
    assert res["unpaired_files"] == ["step_000005.safetensors only in A"]
    assert "only in A" in (tmp_path / "o" / "checkpoints.html").read_text()


def test_checkpoint_folders_over_steps_draw_curves(tmp_path):
    a, b = tmp_path / "A", tmp_path / "B"
    for step in (0, 10, 20):
        _folder(a, {"w": torch.zeros(8)}, step=step)
        _folder(b, {"w": torch.full((8,), 1e-3 * (step + 1))}, step=step)
    assert main(["diverge", "--checkpoints", str(a), str(b), "--out", str(tmp_path / "o")]) == 0
    res = json.loads((tmp_path / "o" / "checkpoints.json").read_text())
    assert [p["step"] for p in res["pairs"]] == [0, 10, 20]
    assert res["pairs"][2]["max_abs"] == pytest.approx(0.021, rel=1e-6)
    assert (tmp_path / "o" / "fig_checkpoints.svg").is_file()


def test_checkpoint_folders_accept_torch_state_dicts(tmp_path, capsys):
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    torch.save({"w": torch.zeros(4)}, tmp_path / "A" / "model.pt")
    torch.save({"w": torch.ones(4)}, tmp_path / "B" / "other.pt")
    assert main(["diverge", "--checkpoints", str(tmp_path / "A"), str(tmp_path / "B"),
                 "--out", str(tmp_path / "o")]) == 0
    assert "model.pt vs other.pt" in capsys.readouterr().out


def test_corrupt_checkpoint_exits_2_naming_the_file(tmp_path, capsys):
    a = _folder(tmp_path / "A", {"w": torch.ones(3)})
    (tmp_path / "B").mkdir()
    (tmp_path / "B" / "step_000000.safetensors").write_bytes(b"garbage")
    rc = main(["diverge", "--checkpoints", str(a), str(tmp_path / "B"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "B/step_000000.safetensors" in err and "Traceback" not in err


def test_bad_workload_exits_2(tmp_path, capsys):
    assert main(["diverge", "--workload", "imagenet", "--out", str(tmp_path)]) == 2
    assert "workload='imagenet'" in capsys.readouterr().err


def test_one_seed_is_refused(tmp_path, capsys):
    assert main(["diverge", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "seeds='0'" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["nope", "flash:notaformat", "torch-sdpa-efficient"])
def test_bad_attention_fails_before_training(tmp_path, capsys, spec):
    if spec == "torch-sdpa-efficient" and torch.cuda.is_available():
        pytest.skip("the efficient kernel is available on CUDA machines")
    assert main(["diverge", "--attention", spec, "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "training" not in captured.out and spec.split(":")[-1] in captured.err


def test_diverge_flags_map_onto_the_config():
    """Every DivergeConfig field is a CLI flag (torchtitan-style pin of the CLI surface)."""
    import dataclasses

    import typer

    from attnum.cli import build_app
    from attnum.studies.training.diverge import DivergeConfig

    cmd = typer.main.get_command(build_app()).commands["diverge"]
    flags = {p.name for p in cmd.params}
    assert {f.name for f in dataclasses.fields(DivergeConfig)} <= flags


@pytest.mark.parametrize("mode", ["train", "bias", "checkpoints"])
def test_a_second_diverge_on_a_folder_in_use_is_refused_in_one_line(tmp_path, capsys, mode):
    """One writer per folder, as for sweeps: two diverges on one --out would overwrite each other's runs."""
    from attnum.store.lock import FolderLock

    out = tmp_path / "dv"
    out.mkdir()
    first = FolderLock(out, "attnum diverge --out dv")  # another process's diverge, as the lock sees it
    a, b = (_folder(tmp_path / name, {"w": torch.ones(2)}) for name in "ab")
    args = {"train": ["--steps", "2", "--ckpt-every", "1", "--seeds", "0,1"],
            "bias": ["--profile", "bias-tiny", "--workload", "lm", "--steps", "2", "--seeds", "0"],
            "checkpoints": ["--checkpoints", str(a), str(b)]}[mode]
    try:
        assert main(["diverge", *args, "--out", str(out)]) == 2
    finally:
        first.release()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is in use by 'attnum diverge --out dv'" in line and "--out" in line
    assert sorted(p.name for p in out.iterdir()) == []  # nothing written (the first's lock is removed on release)
