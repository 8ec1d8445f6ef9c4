"""Sweep specs: products of axes, listed points, and bad input rejected before any point runs."""

from __future__ import annotations

import pytest
from _sweep_helpers import TINY_COMPARE_POINTS, TINY_KERNEL_POINTS, run_cli, write_spec

from attnum.errors import AttnumInputError
from attnum.experiments.spec import load_spec, spec_from_dict


def test_product_and_kernel_points(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    planned = spec.planned()
    kinds = [p.kind for p, _ in planned.values()]
    assert kinds.count("compare") == TINY_COMPARE_POINTS
    # e5m4 has no torch dtype, so only bf16/fp16 get kernel points, shared by both policies.
    assert kinds.count("kernels") == TINY_KERNEL_POINTS
    assert len(set(planned)) == len(planned)


def test_listed_points_groups_and_dedup():
    spec = spec_from_dict({
        "name": "g",
        "record": ["flash_vs_golden"],
        "group": [
            {"name": "a", "axes": {"seq_len": [32, 64], "format": "fp16"}},
            {"name": "b", "points": [{"seq_len": 32, "format": "fp16"}, {"seq_len": 16, "format": "fp16"}]},
        ],
    })
    planned = spec.planned()
    assert len(planned) == 3  # (32, fp16) is shared by both groups, stored once
    shared = [groups for p, groups in planned.values() if p.seq_len == 32]
    assert shared == [("a", "b")]
    assert all(p.kind == "compare" for p, _ in planned.values())  # no "kernels" in record


def test_same_points_same_hash_different_points_different_hash(tmp_path):
    a = load_spec(write_spec(tmp_path))
    b = load_spec(write_spec(tmp_path, name="copy.toml"))
    assert a.spec_hash == b.spec_hash
    c = load_spec(write_spec(tmp_path, text=write_spec(tmp_path).read_text().replace("[0, 1]", "[0, 2]"),
                             name="c.toml"))
    assert c.spec_hash != a.spec_hash


@pytest.mark.parametrize(
    "bad, where",
    [
        ("[axes]\nformat = ['bf16']\nbogus = [1]\n", "axes.bogus"),
        ("[axes]\nformat = []\n", "axes.format=[]"),
        ("[axes]\nformat = ['e99m3']\n", "axes.format='e99m3'"),
        ("[axes]\npolicy = ['nope']\n", "axes.policy='nope'"),
        ("[axes]\nseq_len = [0]\n", "axes.seq_len=0"),
        ("[axes]\nblock_k = [-4]\n", "axes.block_k=-4"),
        ("[axes]\nvariant = ['fa3']\n", "axes.variant='fa3'"),
        ("[axes]\nsram = [4096]\nblock_k = [64]\n", "impossible"),
        ("[axes]\nkv_order = ['sideways']\n", "axes.kv_order='sideways'"),
        ("record = ['everything']\n[axes]\nseq_len = [8]\n", "record='everything'"),
        ("kernels = ['no-such-kernel']\n[axes]\nseq_len = [8]\n", "kernels='no-such-kernel'"),
        ("colour = 'red'\n[axes]\nseq_len = [8]\n", "colour"),
        ("name = 'x'\n", "nothing to run"),
        ("[axes\n", "not valid TOML"),
    ],
    ids=lambda x: x if len(x) < 30 else None,
)
def test_bad_spec_names_file_key_value_allowed(tmp_path, bad, where):
    path = write_spec(tmp_path, text=bad, name="bad.toml")
    with pytest.raises(AttnumInputError) as err:
        load_spec(path)
    msg = str(err.value)
    assert str(path) in msg and where in msg and "\n" not in msg, msg


def test_cli_rejects_bad_spec_before_running(tmp_path):
    path = write_spec(tmp_path, text="[axes]\nformat = ['bf16', 'e3m0']\n", name="bad.toml")
    proc = run_cli("sweep", path, "--out", tmp_path / "out", check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.toml" in lines[0] and "format='e3m0'" in lines[0] and "expected" in lines[0]
    assert not (tmp_path / "out").exists()  # nothing ran, no store was created


def test_folder_with_other_spec_is_refused(tmp_path):
    out = tmp_path / "out"
    run_cli("sweep", write_spec(tmp_path, text="[axes]\nseq_len = [8]\nformat = ['fp32']\n"), "--out", out, "--quiet")
    other = write_spec(tmp_path, text="[axes]\nseq_len = [16]\nformat = ['fp32']\n", name="other.toml")
    proc = run_cli("sweep", other, "--out", out, "--quiet", check=False)
    assert proc.returncode == 2 and "different spec" in proc.stderr, proc.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU-only refusal")
def test_cuda_sweep_refused_up_front_without_cuda(tmp_path):
    from attnum.cli import main

    assert main(["reproduce", "--profile", "smoke", "--device", "cuda", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert not (tmp_path / "o" / "attnum.sqlite").exists()
