"""attnum fingerprint recovers hidden configurations of the families issue 41 adds: kernels whose P V
accumulates on a matrix unit (attnum's ``fa2:...,mma=ARCH``, the accumulator chained through the MMA or
each tile from zero), Triton's flash forward (the fused-attention tutorial's arithmetic), un-tiled
attention (torch's eager ops, SDPA's math path) and an accumulator rounded once per update.

Each configuration is drawn at random (seed ``ATTNUM_FINGERPRINT_SEED``, as tests/audit/fingerprint/
test_fingerprint.py draws its own) and hidden from the fingerprinter, which sees only an SDPA-signature
callable. The recovered tile (or one of the structures listed as reproducing equally), the architecture
(among those the calls cannot tell apart), the hidden sites (among each site's alternatives) and a
reproduction bit-identical on fresh inputs are held to the hidden ones. The structure model's
predictions for the MMA's groups are held to replays of the MMA itself."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from attnum.attention.flash import flash_attention
from attnum.attention.serving.decode import decode_attention
from attnum.audit.fingerprint import fingerprint
from attnum.numerics.mma.arch import ARCHS
from attnum.numerics.policy import parse_policy

SEED = int(os.environ.get("ATTNUM_FINGERPRINT_SEED", "20261203"))
LENGTHS, HEADS, D = (200, 500), 8, 16
TILES = (16, 32, 48, 64, 80, 96, 112, 128)
KIND = {"bf16": "bf16", "fp16": "fp16"}


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def mma_configs(n: int, seed: int) -> list[dict]:
    """Hidden configurations on a matrix unit: dtype, architecture (any with that operand type), the
    accumulator chained or each tile from zero, tile, one split or several (decode)."""
    rng = random.Random(seed)
    # issue 41's two: fa2:bf16,mma=sm80 and fa2:fp16,mma=sm90 with a tile it is not told
    out = [{"dtype": "bf16", "arch": "sm80", "chain": True, "block_k": rng.choice(TILES), "num_splits": 1},
           {"dtype": "fp16", "arch": "sm90", "chain": True, "block_k": rng.choice(TILES), "num_splits": 1}]
    for i in range(n):
        dtype = ("bf16", "fp16")[i % 2]
        archs = [a for a in ARCHS if KIND[dtype] in ARCHS[a].instructions]
        cfg = {"dtype": dtype, "arch": rng.choice(archs), "chain": rng.random() < 0.7, "block_k": rng.choice(TILES),
               "num_splits": rng.choice((1, 1, 2, 3))}
        if rng.random() < 0.3:
            cfg["site"] = rng.choice(("scores=bf16", "exp=bf16", "rescale=bf16"))
        out.append(cfg)
    return out


def _mma_policy(cfg: dict) -> str:
    spec = f"fa2:{cfg['dtype']},mma={cfg['arch']}" + ("" if cfg["chain"] else ",mma_chain=off")
    return spec + (f",{cfg['site']}" if cfg.get("site") else "")


def _tiles(doc: dict) -> list:
    return [doc["kv_block"]] + [a["kv_block"] for a in doc.get("structure_alternatives") or []]


@pytest.mark.parametrize("cfg", mma_configs(6, SEED + 2), ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_hidden_matrix_unit_configuration_recovered(cfg):
    policy = _mma_policy(cfg)

    def fn(q, k, v, attn_mask=None, is_causal=False, scale=None):
        if cfg["num_splits"] == 1:
            return flash_attention(q, k, v, policy=policy, block_k=cfg["block_k"]).to(q.dtype)
        return decode_attention(q, k, v, is_causal=False, policy=policy, block_k=cfg["block_k"],
                                num_splits=cfg["num_splits"]).to(q.dtype)

    doc = fingerprint(fn, dtype=cfg["dtype"], lengths=LENGTHS, heads=HEADS, d=D, seed=7)
    assert doc["policy"] is not None, doc
    assert cfg["block_k"] in _tiles(doc), doc
    assert cfg["arch"] in doc["architectures"]["indistinguishable"], doc["architectures"]
    hidden = parse_policy(policy)
    for site in ("scores", "exp", "rescale", "acc", "out"):
        row = doc["sites"][site]
        assert getattr(hidden, site).name in row["alternatives"], (site, row)
    assert doc["bit_exact_fraction"] == 1.0 and doc["residual_ulp"] == 0.0, doc["fresh_checks"]
    chained = "in the MMA" in doc["accumulation"]
    assert chained == cfg["chain"] or not doc["structure_determined"], doc["accumulation"]


def dot_flash_configs(n: int, seed: int) -> list[dict]:
    """fp16 (the tutorial as written) but for the last, bf16 (its edit casting P to the input dtype)."""
    rng = random.Random(seed)
    return [{"dtype": "fp16" if i < n - 1 else "bf16", "block_n": rng.choice((16, 32, 64, 128)),
             "arch": rng.choice(("sm80", "sm90")), "fused": rng.random() < 0.7} for i in range(n)]


@pytest.mark.parametrize("cfg", dot_flash_configs(3, SEED + 3), ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_hidden_triton_flash_configuration_recovered(cfg):
    """Triton's flash forward (attnum.kernels.triton.dot_flash: the tutorial's arithmetic, bit-exact to the
    tutorial kernel under the faithful model) with a hidden BLOCK_N, architecture and FP fusion. In bf16 the
    output's 8 bits can hide the difference between exp2 with the scale folded into log2 e and FA2's exp of
    the scaled scores on every call made: then both are listed (the tile arithmetic undetermined), and the
    fresh check must not call a wrong pick exact."""
    from attnum.kernels.triton.dot_flash import dot_flash

    def fn(q, k, v, attn_mask=None, is_causal=False, scale=None):
        return dot_flash(q, k, v, block_n=cfg["block_n"], arch=cfg["arch"], fused=cfg["fused"])

    # d = 32: the tutorial's smallest head dim (at d = 16 the scale 1/4 is a power of 2, and exp of the
    # scaled scores and exp2 with the scale folded into log2 e agree on most 16-bit outputs)
    doc = fingerprint(fn, dtype=cfg["dtype"], lengths=(256, 640), heads=HEADS, d=32, seed=7)
    assert doc["policy"] is not None, doc
    assert cfg["block_n"] in _tiles(doc), doc
    assert cfg["arch"] in doc["architectures"]["indistinguishable"], doc["architectures"]
    tile = doc["sites"]["tile"]
    want = f"tl-dot-flash:{cfg['dtype']},mma={'sm80' if cfg['arch'] in ('sm80', 'sm89') else 'sm90'}," \
           f"{'' if cfg['fused'] else 'no-'}fp-fusion"
    assert any(a.split(",mma=")[0] == want.split(",mma=")[0] for a in tile["alternatives"]), tile
    if cfg["dtype"] == "fp16" or tile["determined"]:
        assert tile["determined"] and doc["bit_exact_fraction"] == 1.0, (tile, doc["fresh_checks"])
    else:
        assert doc["bit_exact_fraction"] == 1.0 or doc["unexplained"], doc


def _eager(q, k, v, attn_mask=None, is_causal=False, scale=None):
    s = (q @ k.transpose(-1, -2)) * (1.0 / q.shape[-1] ** 0.5)
    return torch.softmax(s, -1) @ v


def _math(q, k, v, attn_mask=None, is_causal=False, scale=None):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def untiled_configs(seed: int) -> list[dict]:
    """Eager in bf16 (issue 41's case), SDPA's math path in fp16, the baseline in a drawn dtype."""
    rng = random.Random(seed)
    return [{"dtype": "bf16", "kind": "eager"}, {"dtype": "fp16", "kind": "math"},
            {"dtype": rng.choice(("bf16", "fp16")), "kind": "baseline"}]


@pytest.mark.parametrize("cfg", untiled_configs(SEED + 4), ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_hidden_untiled_attention_recovered(cfg):
    """Eager attention written as a user writes it in torch, SDPA's math path, and attnum's baseline under a
    hidden one-site variant of torch-eager: un-tiled, bit-exact on fresh inputs."""
    from attnum.attention.baseline import baseline_attention

    rng = random.Random(SEED + 5)
    site = rng.choice(("scores", "probs", "out"))
    policy = f"torch-eager:{cfg['dtype']},{site}=fp32"
    fn = {"eager": _eager, "math": _math,
          "baseline": lambda q, k, v, **kw: baseline_attention(q, k, v, policy=policy).to(q.dtype)}[cfg["kind"]]
    doc = fingerprint(fn, dtype=cfg["dtype"], lengths=LENGTHS, heads=HEADS, d=D, seed=7)
    assert doc["tiling"] == "un-tiled" and doc["kv_block"] is None, doc
    assert doc["bit_exact_fraction"] == 1.0 and doc["unexplained"] is None, doc["fresh_checks"]
    if cfg["kind"] == "baseline":
        assert doc["sites"][site]["determined"] is False or doc["sites"][site]["format"] == "fp32", doc["sites"]


@pytest.mark.parametrize("dtype,block_k,splits", [("bf16", random.Random(SEED + 6).choice(TILES), 1),
                                                  ("fp16", random.Random(SEED + 7).choice(TILES), 2)])
def test_hidden_accumulator_rounded_once_per_update_recovered(dtype, block_k, splits):
    """O kept in the output format, each update O alpha + P V formed in fp32 and rounded once
    (``acc_update=once``): recovered with its tile, and told apart from the three roundings of ``acc``."""
    policy = f"fa2:{dtype},acc={dtype},acc_update=once"

    def fn(q, k, v, attn_mask=None, is_causal=False, scale=None):
        return decode_attention(q, k, v, is_causal=False, policy=policy, block_k=block_k,
                                num_splits=splits).to(q.dtype)

    doc = fingerprint(fn, dtype=dtype, lengths=LENGTHS, heads=HEADS, d=D, seed=7)
    assert block_k in _tiles(doc), doc
    assert "once" in doc["sites"]["acc_update"]["alternatives"], doc["sites"]
    assert doc["sites"]["acc_update"]["determined"] and doc["policy"].endswith("acc_update=once"), doc["policy"]
    assert doc["bit_exact_fraction"] == 1.0, doc["fresh_checks"]


@pytest.mark.parametrize("arch,dtype,block_k,order,chain", [
    ("sm80", torch.bfloat16, 32, "forward", True), ("sm90", torch.float16, 48, "reverse", True),
    ("sm80", torch.float16, 64, "forward", False), ("sm90", torch.bfloat16, 32, "reverse", False),
    ("sm70", torch.float16, 16, "forward", True)])
def test_the_structure_model_predicts_the_mma_s_survivals(arch, dtype, block_k, order, chain):
    """Every survival the structure model predicts for a tile on an MMA (groups of L, chained or from zero,
    tiles walked forward or reverse) is the replay's: attnum's flash under ``mma=ARCH`` on the probe
    columns, one split."""
    from attnum.audit.fingerprint import probes, structure

    S, H, d = 160, 4, 16
    fmt = {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    L = ARCHS[arch].instruction(fmt).L
    cols = probes.SwampColumns.join(probes.swamp_columns(S), probes.accumulate_columns(S))
    policy = f"fa2:{fmt},mma={arch}" + ("" if chain else ",mma_chain=off")

    def fn(q, k, v, attn_mask=None, is_causal=False, scale=None):
        return flash_attention(q, k, v, policy=policy, block_k=block_k, kv_order=order).to(q.dtype)

    surv, _ = probes.run_swamp(probes.CountedTarget(fn), S, heads=H, d=d, dtype=fmt, cols=cols)
    pred = structure.predict(cols, block_k=block_k, span=None, order=order, S=S, group=L, chain=chain)
    known = pred >= 0
    assert known.mean() > 0.99, known.mean()
    assert np.array_equal(pred[known], surv[known].astype(np.int8)), np.nonzero(pred[known] != surv[known])[0][:10]


def test_undetermined_choices_are_named_and_resolve_runs_more_calls():
    """FA2's reciprocal and a division agree on most 16-bit outputs: undetermined, the reproduction says it
    picks one, and the document says how to tell them apart; with ``resolve`` the extra calls run and the
    candidates left are the ones that reproduce them too (never more than before)."""
    def fn(q, k, v, attn_mask=None, is_causal=False, scale=None):
        return flash_attention(q, k, v, policy="fa2:bf16", block_k=32).to(q.dtype)

    doc = fingerprint(fn, dtype="bf16", lengths=LENGTHS, heads=HEADS, d=D, seed=7)
    choices = {u["choice"] for u in doc["undetermined"]}
    assert "site normalize" in choices, doc["undetermined"]
    assert "picks one of the choices" in doc["reproduction"] and doc["resolve"].startswith("resolve=True (--resolve) runs 8 more calls"), doc
    again = fingerprint(fn, dtype="bf16", lengths=LENGTHS, heads=HEADS, d=D, seed=7, resolve=True)
    r = again["resolved"]
    assert r["calls"] > 0 and r["candidates_after"] <= r["candidates_before"] == doc["candidates"], r
    assert again["calls"] == doc["calls"] + r["calls"] and again["bit_exact_fraction"] == 1.0
    assert "reciprocal" in again["sites"]["normalize"]["alternatives"]
