"""The sweep ETA from a cost model of the points left (attnum.sweep.eta), on synthetic sweeps whose true cost is known."""

import random
from types import SimpleNamespace

import pytest

from attnum.sweep.eta import FEATURES, CostModel, attention_features, features, nnls


def _point(n, bc=64, fmt="bf16", kind="compare"):
    runs, kernel_runs = {"compare": (2, 0.0), "attribute": (16, 0.0), "kernels": (0, 3.0)}[kind]
    p = SimpleNamespace(batch=1, heads=8, seq_len=n, kv_len=None, head_dim=64, kind=kind, format=fmt,
                        tiles=lambda: SimpleNamespace(Bc=bc))
    p.cost_features = lambda: attention_features(p, runs=runs, kernel_runs=kernel_runs)
    return p


def _true_seconds(p):  # a "machine": per-element, per-tile and per-point costs
    f = features(p)
    return 2e-9 * f[0] + 3e-8 * f[1] + 2e-7 * f[2] + 1e-3 * f[3] + 5e-9 * f[4] + 0.05 * f[5]


def test_nnls_recovers_non_negative_coefficients_exactly():
    rng = random.Random(0)
    truth = [0.0, 2.0, 0.0, 0.5, 0.0, 1.0]
    rows = [[rng.random() if truth[c] or c == 0 else 0.0 for c in range(len(FEATURES))] for _ in range(50)]
    ys = [sum(t * x for t, x in zip(truth, r)) for r in rows]
    n = len(FEATURES)
    gram = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    rhs = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(n)]
    coef = nnls(gram, rhs, sum(y * y for y in ys))
    assert coef == pytest.approx(truth, abs=1e-6)


def test_eta_at_half_sees_the_expensive_tail_that_the_mean_misses():
    # The quick reproduction's shape: many small points first, a few long (N = 8192) ones last.
    todo = [_point(n) for n in [256, 512, 1024, 2048] * 300] + [_point(8192, bc=16)] * 60
    model, elapsed, half = CostModel(todo), 0.0, len(todo) // 2
    for p in todo[:half]:
        s = _true_seconds(p)
        elapsed += s
        model.observe(p, s)
    actual_left = sum(_true_seconds(p) for p in todo[half:])
    eta = model.eta(elapsed)
    mean_eta = elapsed / half * (len(todo) - half)
    assert abs(eta / actual_left - 1) < 0.05  # the model's tile and area terms carry over to N = 8192
    assert mean_eta < actual_left / 2  # what the old ETA said: less than half the truth


def test_parallel_workers_and_unseen_kinds():
    todo = [_point(1024)] * 40 + [_point(1024, fmt="e8m3")] * 10 + [_point(1024, kind="kernels")] * 5
    model = CostModel(todo)
    assert model.eta(0.0) is None  # nothing done: no estimate yet
    for p in todo[:40]:
        model.observe(p, _true_seconds(p))
    synthetic_wall = sum(_true_seconds(p) for p in todo[:40]) / 2  # two workers: half the point-seconds
    eta = model.eta(synthetic_wall)
    assert eta > 0  # unseen features are costed by the prior, scaled by the run so far
    for p in todo[40:]:
        model.observe(p, _true_seconds(p))
    assert model.eta(synthetic_wall) == 0.0


def test_a_kind_first_seen_late_is_fitted_at_once():
    """The quick reproduction ends with kernel points: once the first is done, the rest are predicted
    from it (a stale fit gave them ~0 s: 'eta 0s' for the last 100 s of the run)."""
    todo = [_point(1024)] * 300 + [_point(4096, kind="kernels")] * 20
    # Costs are a known function (_true_seconds), never a clock: the model's prediction is what is checked.
    model, cost_done = CostModel(todo), 0.0
    for p in todo[:301]:
        model.observe(p, _true_seconds(p))
        cost_done += _true_seconds(p)
        model.eta(cost_done)  # asked after every point, as the sweep's progress does
    cost_left = sum(_true_seconds(p) for p in todo[301:])
    predicted_over_true = model.eta(cost_done) / cost_left
    assert abs(predicted_over_true - 1) < 0.05


def _contended_seconds(p):
    # What the features cannot see: on a shared machine a large working set runs slower per unit of
    # work (memory bandwidth shared with the other worker): 3x per unit at N >= 4096 here.
    return _true_seconds(p) * (3.0 if p.seq_len >= 4096 else 1.0)


def _eta_ratio_at_half(order):
    model, elapsed, half = CostModel(order), 0.0, len(order) // 2
    for p in order[:half]:
        s = _contended_seconds(p)
        elapsed += s
        model.observe(p, s)
    return model.eta(elapsed) / sum(_contended_seconds(p) for p in order[half:])


def test_the_sweep_runs_in_a_seeded_shuffled_order_so_the_eta_holds_beyond_its_features():
    from attnum.sweep.executors import run_order

    listed = [_point(n) for n in [256, 512, 1024, 2048] * 300] + [_point(8192, bc=16) for _ in range(60)]
    order = run_order(listed, "0123456789abcdef")
    assert sorted(map(id, order)) == sorted(map(id, listed)) and order != listed  # a permutation
    assert [id(p) for p in run_order(listed, "0123456789abcdef")] == [id(p) for p in order]  # seeded
    assert _eta_ratio_at_half(listed) < 0.5  # the expensive tail, under-costed by the features: far off
    assert 0.8 < _eta_ratio_at_half(order) < 1.25  # a fair sample of the points left: close
