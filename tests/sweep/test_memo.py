"""attnum.sweep.memo: a result reused only for equal inputs, and a point's numbers the same with or without it."""

from __future__ import annotations

import pytest
import torch

from attnum.studies.paper.compare import CompareConfig, run_compare
from attnum.sweep import memo


@pytest.fixture(autouse=True)
def fresh():
    memo.clear()
    yield
    memo.clear()


def test_reused_for_equal_content_only():
    calls = []
    a = torch.randn(4, 8, dtype=torch.float64)

    def compute():
        calls.append(1)
        return a.sum(0)

    first = memo.reuse("t", (a,), "x", compute, 32)
    assert memo.reuse("t", (a.clone(),), "x", compute, 32) is first  # equal values, another tensor
    assert len(calls) == 1
    b = a.clone()
    b[3, 7] = torch.nextafter(b[3, 7], torch.tensor(float("inf"), dtype=torch.float64))  # one ulp
    memo.reuse("t", (b,), "x", compute, 32)
    memo.reuse("t", (a,), "y", compute, 32)  # other arguments
    memo.reuse("t", (a.float(),), "x", compute, 32)  # other dtype
    memo.reuse("u", (a,), "x", compute, 32)  # other kind
    assert len(calls) == 5


def test_cheapest_leave_first(monkeypatch):
    monkeypatch.setattr(memo, "BUDGET_BYTES", 3 * 8 * 100)
    xs = [torch.full((100,), float(i), dtype=torch.float64) for i in range(4)]
    for i, cost in enumerate((50, 10, 40)):
        memo.reuse("t", (xs[i],), None, xs[i].clone, cost)
    memo.reuse("t", (xs[3],), None, xs[3].clone, 30)  # over budget: the cost-10 entry goes
    calls = []
    for i in (0, 2, 3):
        memo.reuse("t", (xs[i],), None, lambda: calls.append(i) or xs[i].clone(), 0)
    assert calls == []
    memo.reuse("t", (xs[1],), None, lambda: calls.append(1) or xs[1].clone(), 10)
    assert calls == [1]


@pytest.mark.parametrize("policy", ["uniform", "fa2"])
def test_points_sharing_inputs_give_the_numbers_they_give_alone(policy):
    points = [CompareConfig(policy=policy, format="bf16", seq_len=192, head_dim=16, heads=2, seed=3, block_k=bk,
                            variant=var, causal=causal)
              for bk in (16, 64) for var in ("fa1", "fa2") for causal in (False, True)]
    shared = [run_compare(p)["metrics"] for p in points]  # the memo serves all but the first of each mask
    alone = []
    for p in points:
        memo.clear()
        alone.append(run_compare(p)["metrics"])
    assert shared == alone
