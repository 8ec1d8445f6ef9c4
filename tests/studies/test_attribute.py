"""`attnum attribute`: the error budget per rounding site, from the API, the CLI and a sweep."""

from __future__ import annotations

import json

import pytest

from attnum.cli import main
from attnum.errors import AttnumInputError
from attnum.numerics.policy import parse_policy
from attnum.studies.paper.attribute import (
    ATTRIBUTED,
    AttributeConfig,
    budget_rows,
    floor_policy,
    only_policy,
    run_attribute,
    without_policy,
)
from attnum.studies.paper.compare import CompareConfig, run_compare

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = dict(format="bf16", seq_len=96, heads=1, head_dim=16, block_q=16, block_k=8)


def test_site_policies_change_one_site_and_keep_the_carrier():
    p = parse_policy("uniform:bf16")
    floor = floor_policy(p)
    assert all(getattr(floor, s).name == "fp32" for s in ATTRIBUTED) and floor.inputs.name == "bf16"
    assert floor.carrier == p.carrier and floor.matmul_mode == "native"  # exact = the carrier: fp32
    only = only_policy(p, "row_sum")
    assert only.row_sum.name == "bf16" and all(getattr(only, s).name == "fp32" for s in ATTRIBUTED if s != "row_sum")
    without = without_policy(p, "row_sum")
    assert without.row_sum.name == "fp32" and without.acc.name == "bf16"
    emulated = parse_policy("fa2:bf16,matmul_acc=fp16,reduction_chunk=4")
    assert floor_policy(emulated).matmul_acc is None and only_policy(emulated, "matmul_acc").matmul_acc.name == "fp16"


def test_one_rounding_site_alone_is_the_whole_budget():
    """fa2:bf16 with probs in fp32 rounds beyond the carrier only at ``out``: alone it is the full
    deviation, bit for bit, and exact it leaves exactly the floor."""
    r = run_attribute(CompareConfig(policy="fa2,probs=fp32", **SMALL))
    assert [s for s, v in r["sites"].items() if v["rounds"]] == ["out"]
    out = r["sites"]["out"]
    for impl in ("flash", "baseline"):
        assert out["only"][impl] == r["full"][impl] and out["without"][impl] == r["floor"][impl]
    assert r["dominant"]["flash"] == {"site": "out", "alone": 1.0, "left": r["floor"]["flash"]["mean_abs"]
                                      / r["full"]["flash"]["mean_abs"]}


def test_full_run_is_run_compare_and_baseline_has_no_rescale():
    cfg = CompareConfig(policy="uniform", **SMALL)
    r = run_attribute(cfg)
    c = run_compare(cfg)
    assert r["full"]["flash"] == c["metrics"]["flash_vs_golden"]
    assert r["full"]["baseline"] == c["metrics"]["baseline_vs_golden"]
    assert r["sites"]["rescale"]["rounds_in"] == ["flash"]
    assert r["sites"]["rescale"]["only"]["baseline"] == r["floor"]["baseline"]
    assert {row["site"] for row in budget_rows(r)} == {*ATTRIBUTED, "full", "floor"}
    with pytest.raises(AttnumInputError, match="metric="):
        AttributeConfig(compare=cfg, metric="nope")


def test_cli_table_json_and_bar_chart(tmp_path, capsys):
    args = ["attribute", "--policy", "uniform:bf16", "--seq-len", "96", "--heads", "1", "--head-dim", "16",
            "--block-k", "8"]
    assert main([*args, "--plot", str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert "dominant site: " in text and "row_sum" in text and "not attributed: inputs" in text
    assert (tmp_path / "b.png").stat().st_size > 10_000 and (tmp_path / "b.svg").is_file()
    assert main([*args, "--json", "--baseline-policy", "torch-eager"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["baseline_policy"] == "torch-eager:bf16" and res["dominant"]["flash"]["site"] in ATTRIBUTED


def test_attribute_kind_in_a_sweep_is_stored(tmp_path):
    from attnum.store.db import open_store
    from attnum.sweep.executors import SweepOptions, run_sweep
    from attnum.sweep.spec import spec_from_dict

    spec = spec_from_dict({"name": "a", "record": ["flash_vs_golden"], "defaults": {**SMALL, "policy": "uniform"},
                           "axes": {"kind": ["compare", "attribute"], "baseline_policy": "torch-eager"}})
    run_sweep(spec, SweepOptions(out=tmp_path, quiet=True))
    with open_store(tmp_path) as store:
        rows = {r["kind"]: r for r in store.rows()}
    assert set(rows) == {"compare", "attribute"}
    assert rows["attribute"]["metrics"]["dominant"]["flash"]["site"] in ATTRIBUTED
    assert rows["compare"]["metrics"]["baseline_policy_sites"]["name"] == "torch-eager:bf16"
    assert "mean_signed" in rows["compare"]["metrics"]["flash_vs_golden"]  # signed metrics in the store
    with pytest.raises(AttnumInputError, match="kind='kernels'"):
        spec_from_dict({"name": "a", "axes": {"kind": "kernels"}})


def test_ratio_against_a_floor_is_not_a_ratio():
    """A site one implementation lacks (the baseline has no online-softmax rescale) is compared with that
    implementation's floor: no flash/baseline ratio, and the table says why."""
    from attnum.studies.paper.attribute import ratio_text

    row = {"site": "rescale", "rounds": True, "rounds_in": ("flash",), "only_flash": 3.3e-5, "only_baseline": 1.1e-8}
    assert ratio_text(row) == "n/a (baseline has no such site)"
    assert ratio_text({**row, "site": "scores"}) == "n/a (baseline does not round here)"
    assert ratio_text({**row, "rounds_in": ("flash", "baseline")}) == f"{3.3e-5 / 1.1e-8:.3g}x"
    assert ratio_text({**row, "site": "floor", "rounds_in": ("flash", "baseline")}) == f"{3.3e-5 / 1.1e-8:.3g}x"


def test_cli_rescale_row_says_na(capsys):
    from attnum.cli import main

    assert main(["attribute", "--policy", "uniform:bf16", "--seq-len", "128", "--heads", "1", "--block-q", "64",
                 "--block-k", "16"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("rescale"))
    assert "n/a (baseline has no such site)" in line and "x " not in line.split("n/a")[0][-3:]
