"""Tie detector (attention/ties.py) and the tie-aware input generators (inputs.py)."""

import math

import pytest
import torch

from attnum.attention.ties import TieCount, count_ties, score_ties
from attnum.errors import AttnumInputError
from attnum.workloads.inputs import TIE_DISTINCT, InputSpec, low_rank_rows, make_qkv, tied_rows

NEG = -math.inf


def test_count_ties_on_hand_made_rows():
    s = torch.tensor([[2.0, 2.0, 1.0, 2.0],               # exact, 3 at the max
                      [1.0, 1.0 - 2.0 ** -10, 0.0, 0.5],  # near only (gap 0.00098 <= tol)
                      [1.0, 1.0 - 2.0 ** -9, 0.0, 0.5],   # no tie (gap 0.00195)
                      [NEG, NEG, NEG, NEG],               # empty: not a row
                      [NEG, 3.0, NEG, 3.0]],              # masked entries tie with nothing
                     dtype=torch.float64)
    assert count_ties(s) == TieCount(rows=4, exact=2, near=3, max_ties=3, ties=3 + 2 + 2)
    assert count_ties(s, tol=0.0) == TieCount(rows=4, exact=2, near=2, max_ties=3, ties=5)


def test_count_ties_per_tile_and_in_a_format():
    s = torch.tensor([[5.0, 1.0, 5.0, 1.0, 0.0]], dtype=torch.float64)  # the two maxima in different tiles
    assert count_ties(s).near == 1
    assert count_ties(s, block=2) == TieCount(rows=3, exact=0, near=0, max_ties=1, ties=0)
    assert count_ties(s, block=4).near == 1  # last tile padded with -inf: (0.0,) has one key
    close = torch.tensor([[1.0, 1.0 + 2.0 ** -12]], dtype=torch.float64)  # both round to 1.0 in bf16
    assert count_ties(close, tol=0.0).exact == 0 and count_ties(close, fmt="bf16", tol=0.0).exact == 1
    with pytest.raises(AttnumInputError, match="block=0"):
        count_ties(s, block=0)


def test_score_ties_counts_the_kernels_scores():
    q, k, _ = make_qkv(InputSpec(dist="ties", heads=2, seq_len=64, head_dim=16))
    # A BLAS may sum identical key columns in different orders (edge vs main micro-kernel tiles, by
    # CPU), so exact fp64 ties of normal inputs are the machine's: only the tolerance count is portable.
    assert score_ties(q, k, policy="fp64").near == 2 * 64
    # Dyadic inputs with few bits make every dot product exact in fp64, whatever the summation order.
    qe, ke = (torch.round(x * 8) / 8 for x in (q, k))
    t = score_ties(qe, ke, policy="fp64", detail=True)
    assert t.rows == t.exact == t.near == 2 * 64  # every row's maximum is shared
    assert t.max_ties >= 64 // TIE_DISTINCT
    assert score_ties(q, k, policy="fp64").max_ties is None  # detail off: only the row counts
    causal = score_ties(q, k, policy="fp64", is_causal=True)
    assert causal.rows == 128 and causal.near < 128  # the first TIE_DISTINCT rows see one copy at most
    assert score_ties(q, k, policy="fp64", block=2 * TIE_DISTINCT).near_fraction == 1.0
    qn, kn, _ = make_qkv(InputSpec(heads=2, seq_len=64, head_dim=16))
    assert score_ties(qn, kn, policy="fp64", tol=0.0).exact == 0  # continuous scores never tie in fp64
    assert score_ties(qn, kn, policy="uniform:e4m3fn", tol=0.0).exact > 0  # a 3-bit mantissa makes ties


def test_tied_rows_cycle_and_low_rank_rows_have_their_rank():
    g = torch.Generator().manual_seed(0)
    t = tied_rows((2, 10, 3), 4, g)
    assert torch.equal(t[:, 4:8], t[:, 0:4]) and torch.equal(t[:, 8:], t[:, :2])
    assert len({tuple(r.tolist()) for r in t[0]}) == 4
    x = low_rank_rows((1, 50, 16), 2, 0.5, g)[0]
    sv = torch.linalg.svdvals(x - x.mean(0))  # the shared direction removed: rank 2 spread
    assert float(sv[2]) <= 1e-12 * float(sv[0]) and float(sv[1]) > 0


def test_new_dists_keep_the_old_ones_unchanged():
    spec = dict(heads=2, seq_len=8, head_dim=4, seed=3)
    q, k, v = make_qkv(InputSpec(**spec))
    qt, kt, vt = make_qkv(InputSpec(dist="ties", **spec))
    assert torch.equal(q, qt) and not torch.equal(k, kt)  # ties: normal queries, repeated keys
    ql, kl, vl = make_qkv(InputSpec(dist="lowrank", **spec))
    assert all(x.shape == y.shape for x, y in ((q, ql), (k, kl), (v, vl)))


@pytest.mark.parametrize("fmt", ["bf16", "e4m3fn", "fp16"])
def test_rounding_only_the_top_two_counts_what_rounding_everything_counts(fmt):
    """Rounding is monotone: the lazy path (top-2 and tied rows rounded) equals rounding all first."""
    from attnum import round_to

    g = torch.Generator().manual_seed(1)
    s = torch.randn(64, 48, generator=g, dtype=torch.float64) * 3
    rounded = round_to(s, fmt)
    s[::3, 5] = rounded[::3, 5] = -math.inf  # masked after the rounding, as kernels mask
    for block in (None, 8, 7):
        assert count_ties(s, fmt=fmt, block=block) == count_ties(rounded, block=block), block


def test_additive_mask_goes_through_the_scores_site():
    from attnum.numerics.policy import parse_policy

    q, k, _ = make_qkv(InputSpec(heads=2, seq_len=32, head_dim=8, seed=2))
    pol = parse_policy("uniform:e4m3fn")
    zero = torch.zeros(32, 32, dtype=torch.float64)
    assert score_ties(q, k, policy=pol, attn_mask=zero, detail=True) == score_ties(q, k, policy=pol, detail=True)
    shifted = score_ties(q, k, policy=pol, attn_mask=zero + 0.3)  # added in the scores' format, rounded again
    assert shifted.rows == 64


def test_fast_input_path_gives_the_preamble_values():
    from attnum import round_to
    from attnum.attention import steps
    from attnum.attention.ties import _load
    from attnum.numerics.policy import parse_policy

    g = torch.Generator().manual_seed(0)
    pol = parse_policy("uniform:bf16")
    x = torch.randn(4, 64, generator=g, dtype=torch.float64) * 100
    on_grid = round_to(x, "bf16")
    x[0, 0] = 1 + 2.0 ** -8 + 2.0 ** -30  # just above a bf16 midpoint: float32 first would round it twice
    for t in (x, on_grid, x.float()):
        assert torch.equal(_load(t, pol), steps.load_input(t, pol))
