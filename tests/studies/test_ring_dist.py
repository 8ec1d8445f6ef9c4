"""Ring attention for real: one gloo process per shard equals the simulation bit for bit (P = 2, 4);
a rank that fails or dies is reported with its rank, never left hanging."""

from __future__ import annotations

import pytest
import torch

from attnum.attention.parallel.ring import ring_attention
from attnum.studies.parallel.ring_run import ring_attention_distributed
from attnum.studies.parallel.spawn import RankFailed

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")


def _qkv(N, H=4, G=2, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, H, N, d, generator=g), torch.randn(1, G, N, d, generator=g),
            torch.randn(1, G, N, d, generator=g))


@pytest.mark.parametrize("P,layout,merge_policy", [(2, "zigzag", "fp32"), (4, "contiguous", "fp32,out=bf16")])
def test_gloo_ring_equals_simulation_bit_for_bit(P, layout, merge_policy, one_thread):
    """Causal, GQA, fa2:bf16 blocks, N = 384 (tiles of 128 cut shards of 48 and 96). The ranks and
    this simulation run one BLAS thread each."""
    q, k, v = _qkv(384)
    kw = dict(is_causal=True, shards=P, layout=layout, merge_policy=merge_policy, policy="fa2:bf16", return_lse=True)
    o, lse = ring_attention_distributed(q, k, v, backend="gloo", timeout=100, **kw)
    o_sim, lse_sim = ring_attention(q, k, v, **kw)
    assert o.dtype == o_sim.dtype and torch.equal(o, o_sim)
    assert torch.equal(lse, lse_sim)


@pytest.mark.parametrize("kind,match", [("raise", "rank 1 of 2 failed: RuntimeError: injected fault"),
                                        ("exit", "rank 1 of 2 died with exit code 3")])
def test_failed_rank_is_reported_not_hung(kind, match):
    """Rank 1 raises (or exits without a word) before its first send: rank 0 would wait in recv
    forever; the parent reports rank 1 and ends rank 0 itself. The collective timeout is set far
    beyond the test's own (120 s), so a parent that waited for it would fail by timing out."""
    q, k, v = _qkv(128)
    with pytest.raises(RankFailed, match=match):
        ring_attention_distributed(q, k, v, is_causal=True, shards=2, timeout=3600, fault={"rank": 1, "kind": kind})
