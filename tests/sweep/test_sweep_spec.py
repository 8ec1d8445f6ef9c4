"""Sweep specs: products of axes, listed points, and bad input rejected before any point runs."""

from __future__ import annotations

import dataclasses
import re

import _paths
import pytest
from _sweep_helpers import TINY_COMPARE_POINTS, TINY_KERNEL_POINTS, run_cli, write_spec

from attnum.errors import AttnumInputError
from attnum.sweep.spec import load_spec, spec_from_dict


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
        ("[axes]\ncausal_alignment = ['diagonal']\n", "axes.causal_alignment='diagonal'"),
        ("[axes]\nkv_len = [0]\n", "axes.kv_len=0"),
        ("[defaults]\nheads = 4\n[axes]\nkv_heads = [3]\n", "kv_heads=3"),
        ("[axes]\npolicy = ['fa2:fp16']\n", "policy='fa2:fp16'"),
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


def test_keys_and_hash_of_stores_made_before_the_new_axes_are_unchanged():
    """Pinned from the code before kv_len, kv_heads, causal_alignment and baseline_policy were axes:
    the paper's figure groups keep their points and keys, since fields at their defaults stay out of
    the key (the grid, eager and attribute groups are new: a whole profile's hash is new)."""
    import hashlib
    import json

    from attnum.studies.paper.point import Point
    from attnum.studies.paper.profiles import paper_spec_dict
    from attnum.sweep.spec import spec_from_dict

    data = paper_spec_dict("smoke")
    data["group"] = [g for g in data["group"] if g["name"] not in ("grid", "grid-dist", "grid-mma", "eager", "attribute")]
    spec = spec_from_dict(data)
    assert spec.spec_hash == "7aec5797d7c5a63f"
    keys = sorted(spec.planned())
    assert len(keys) == 196 and hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:16] == "8f1dc129d75c590e"
    p = Point(format="bf16", policy="fa2", seq_len=128, head_dim=16, heads=1, block_q=16, block_k=16, seed=1)
    assert (p.key, p.kernel_point().key) == ("85825a50a06e5365f0bf", "95d21fbccd531964dcff")
    # A new axis off its default is part of the key.
    assert len({p.key, *(dataclasses.replace(p, **kw).key for kw in (
        {"kv_len": 64}, {"kv_heads": 1}, {"causal_alignment": "bottom_right"},
        {"baseline_policy": "torch-eager"}))}) == 5


def test_equal_configs_share_a_key_and_round_trip_through_the_store_config():
    from attnum.studies.paper.point import Point

    a = Point(format="bfloat16", policy="fa2", logit_scale=2, seq_len=32)
    b = Point(format="bf16", policy="fa2", logit_scale=2.0, seq_len=32)
    assert a == b and a.key == b.key and a.config()["format"] == "bf16"
    for p in (a, a.kernel_point()):
        assert Point.from_config(p.config()) == p and Point.from_config(p.config()).key == p.key
    assert a.kernel_point().config()["policy"] is None  # a kernels point runs no policy


@pytest.mark.parametrize("kw, fragment", [
    ({"kind": "kernels", "format": "e5m4"}, "format='e5m4'"),
    ({"kind": "kernels", "block_k": 64}, "block_k=64"),
    ({"kind": "sideways"}, "kind='sideways'"),
])
def test_point_rules_beyond_compare_config(kw, fragment):
    from attnum.studies.paper.point import Point

    with pytest.raises(AttnumInputError, match=re.escape(fragment)):
        Point(**kw)


def test_every_toml_example_in_the_docs_is_a_valid_spec(tmp_path):

    text = (_paths.ROOT / "docs" / "reproduce.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        spec = load_spec(write_spec(tmp_path, text=block, name=f"doc{i}.toml"))
        assert spec.planned()
