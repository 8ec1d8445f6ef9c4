"""attnum fingerprint recovers hidden configurations of attnum's own flash and decode kernels.

Each configuration is drawn at random (seeded) and hidden from the fingerprinter, which sees only an
SDPA-signature callable: the test then holds the recovered tile, splits and policy to the hidden ones
and the reproduction to bit-identity on fresh inputs."""

from __future__ import annotations

import random

import pytest
import torch

from attnum.attention.decode import decode_attention
from attnum.attention.flash import flash_attention
from attnum.audit.fingerprint import fingerprint
from attnum.numerics.policy import parse_policy

LENGTHS = (200, 500)
HEADS, D = 8, 16
BLOCKS = (16, 24, 32, 40, 48, 64, 80, 96, 112, 128)
LOWER = ("scores", "exp", "row_sum", "rescale", "acc")


def _policy(rng: random.Random, dtype: str) -> str:
    base = {"bf16": "fa2:bf16", "fp16": "fa2:fp16", "fp32": "fp32"}[dtype]
    if rng.random() < 0.25:
        return base
    return f"{base},{rng.choice(LOWER)}={'bf16' if dtype != 'bf16' or rng.random() < 0.5 else 'fp16'}"


def hidden_configs(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        dtype = rng.choice(("bf16", "bf16", "fp16", "fp32"))
        cfg = {"dtype": dtype, "policy": _policy(rng, dtype), "block_k": rng.choice(BLOCKS)}
        if i % 2:
            cfg["kind"] = "flash"
        else:
            cfg["kind"] = "decode"
            cfg["num_splits"] = rng.choice((1, 2, 3, 4, 5))
        out.append(cfg)
    return out


def target_of(cfg: dict):
    def fn(q, k, v, attn_mask=None, is_causal=False, scale=None):
        if cfg["kind"] == "flash":
            return flash_attention(q, k, v, policy=cfg["policy"], block_k=cfg["block_k"]).to(q.dtype)
        return decode_attention(q, k, v, is_causal=False, policy=cfg["policy"], block_k=cfg["block_k"],
                                num_splits=cfg["num_splits"]).to(q.dtype)
    return fn


def expected_splits(cfg: dict, S: int) -> int:
    if cfg["kind"] == "flash":
        return 1
    n_blocks = -(-S // cfg["block_k"])
    span = -(-n_blocks // cfg["num_splits"]) * cfg["block_k"]
    return -(-S // span)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("cfg", hidden_configs(20, seed=random.SystemRandom().randrange(1 << 30)
                                               if False else 20261203), ids=lambda c: str(c))
def test_hidden_configuration_recovered(cfg):
    doc = fingerprint(target_of(cfg), dtype=cfg["dtype"], lengths=LENGTHS, heads=HEADS, d=D, seed=7)
    assert doc["kv_block"] == cfg["block_k"], doc
    assert doc["splits"] == {str(S): expected_splits(cfg, S) for S in LENGTHS}, doc
    assert doc["bit_exact_fraction"] == 1.0 and doc["residual_ulp"] == 0.0
    hidden = parse_policy(cfg["policy"])
    for site, row in doc["sites"].items():
        want = getattr(hidden, site)
        want = want.name if hasattr(want, "name") else str(want)
        assert want in row["alternatives"], (site, row, cfg)
        if row["determined"]:
            assert row["format"] == want, (site, row, cfg)
