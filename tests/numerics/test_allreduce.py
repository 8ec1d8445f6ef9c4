"""Reduction order across ranks: the emulated orders, and gloo's, bit for bit with 2 and 4 processes."""

from __future__ import annotations

import pytest
import torch

from attnum.errors import AttnumInputError
from attnum.numerics.allreduce import _even_chunks, allreduce_sum, gloo_chunks, rank_order, row_parallel_linear
from attnum.numerics.rounding import round_to
from attnum.studies.parallel.allreduce_study import (
    AllreduceConfig,
    gloo_allreduce_check,
    rank_data,
    run_allreduce_study,
)


def _chain(parts, order, fmt):
    acc = parts[order[0]]
    for r in order[1:]:
        acc = round_to(acc + parts[r], fmt)
    return acc


def test_orders_are_the_named_chains():
    """Each algorithm against a direct per-chunk chain written out here."""
    P, n = 4, 64  # gloo: 2P segments of 8, chunk c = elements [16c, 16c + 16)
    parts = [rank_data(0, r, n, "bf16") for r in range(P)]
    got = allreduce_sum(parts, "bf16", algorithm="gloo-ring")
    for c in range(P):
        sl = slice(16 * c, 16 * c + 16)
        want = _chain([p[sl] for p in parts], [(c - 1 - i) % P for i in range(P)], "bf16")
        assert torch.equal(got[sl], want)
    assert torch.equal(allreduce_sum(parts, "bf16", algorithm="sequential"), _chain(parts, range(P), "bf16"))
    tree = round_to(round_to(parts[0] + parts[1], "bf16") + round_to(parts[2] + parts[3], "bf16"), "bf16")
    assert torch.equal(allreduce_sum(parts, "bf16", algorithm="tree"), tree)
    assert torch.equal(allreduce_sum(parts[:2], "bf16", algorithm="nccl-ring"),
                       allreduce_sum(parts[:2], "bf16", algorithm="gloo-ring"))  # P = 2: commutative


def test_gloo_segments_and_chunks():
    # 2.3M fp32 on 4 ranks = 9.2 MB: 12 segments of 191,667 elements, 3 per rank
    c = gloo_chunks(2_300_000, 4, 4)
    assert torch.bincount(c).tolist() == [575001, 575001, 575001, 574997]
    assert torch.bincount(gloo_chunks(1001, 4, 4)).tolist() == [252, 252, 252, 245]


@pytest.mark.parametrize("world,specs", [
    (2, ((1001, "bf16"), (1001, "fp32"))),
    (4, ((1001, "bf16"), (4099, "fp16"), (2_300_000, "fp32"))),
])
def test_gloo_allreduce_is_the_emulated_ring_bit_for_bit(world, specs):
    """Real torch.distributed gloo all_reduce(SUM) on `world` CPU processes equals gloo-ring's
    emulation on every element, in bf16, fp16 and fp32, also past 2P MiB (3 segments per rank);
    with 4 ranks the other orders differ, and so does the ring with even chunks."""
    rows = gloo_allreduce_check(world, specs)
    for row in rows:
        print(row["world"], row["n"], row["format"], row["mismatches"])
        assert row["ranks_agree"]
        assert row["mismatches"]["gloo-ring"] == 0
        if world == 4:
            assert min(v for k, v in row["mismatches"].items() if k != "gloo-ring") > 0
    if world == 4:
        n, fmt = specs[-1]
        parts = torch.stack([rank_data(0, r, n, fmt) for r in range(world)])
        order = rank_order(world, "gloo-ring")[_even_chunks(n, world)].T
        Xo = parts.gather(0, order)
        acc = Xo[0]
        for i in range(1, world):
            acc = round_to(acc + Xo[i], fmt)
        assert int((acc != rows[-1]["gloo"]).sum()) > 0  # chunk boundaries matter: gloo's are segment-aligned


def test_row_parallel_deviation_against_tp():
    """An fp32 all-reduce rounds to bf16 once, like the unsharded layer: its error stays that of
    TP = 1 (within a factor for the changed summation order); a bf16 all-reduce rounds every partial
    and every sum, and its error grows with TP."""
    rows = run_allreduce_study(AllreduceConfig(tp=(1, 2, 8), in_features=1024, out_features=128, tokens=64, dp=(2,),
                                               grad_size=256))["rows"]
    tp = {(r["tp"], r["algorithm"], r["reduce_format"]): r for r in rows if r["study"] == "tp"}
    one = tp[(1, "none", "bf16")]["rel_rmse"]
    assert one <= 2.0**-8  # one bf16 rounding: relative rms at most u = 2**-8 (of the rms)
    assert tp[(8, "gloo-ring", "fp32")]["rel_rmse"] <= 1.25 * one
    assert tp[(8, "gloo-ring", "bf16")]["rel_rmse"] > tp[(2, "gloo-ring", "bf16")]["rel_rmse"] > 1.25 * one
    dp = [r for r in rows if r["study"] == "dp"]
    assert all(r["changed"] == 0.0 for r in dp)  # P = 2: one addition and a halving: correctly rounded


def test_bad_input():
    with pytest.raises(AttnumInputError, match="algorithm"):
        allreduce_sum([torch.zeros(3)] * 2, "bf16", algorithm="butterfly")
    with pytest.raises(AttnumInputError, match="tp"):
        row_parallel_linear(torch.zeros(2, 10), torch.zeros(10, 3), tp=3, reduce_format="bf16")


def test_report_section(tmp_path):
    from attnum.studies.parallel.report import write_ring_report
    from attnum.studies.parallel.ring_study import RingConfig, run_ring

    study = run_allreduce_study(AllreduceConfig(tp=(1, 2), in_features=64, out_features=8, tokens=4, dp=(2,),
                                                grad_size=16))
    ring = run_ring(RingConfig(shards=(2,), layout=("zigzag",), seq_len=128, heads=1, head_dim=16))
    page = write_ring_report(ring, tmp_path, study)
    text = page.read_text()
    assert "reduction order" in text and (tmp_path / "tp_allreduce.png").is_file()
    assert (tmp_path / "ring_deviation.svg").is_file() and (tmp_path / "allreduce.json").is_file()
