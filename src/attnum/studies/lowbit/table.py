"""``attnum lowbit-table``: the SageAttention accuracy tables re-run on attnum's emulation.

Metrics (SageAttention's definitions, arXiv 2410.02367 Sec. 4, over the flattened output O' against
the float64 golden O): CosSim = sum(O O') / sqrt(sum O**2 sum O'**2); relative L1 = sum|O - O'| / sum|O|;
RMSE = sqrt(mean (O - O')**2).

The published numbers come from model layers (Llama2-7B and Unidiffuser for SageAttention1's Table 2
and 4 averages; CogVideoX for SageAttention2's Tables 4, 6, 7); attnum runs the same configurations
on synthetic inputs with the structure those layers have (:mod:`attnum.workloads.structured`). The claim
checked is each table's *ordering*; :func:`orderings` computes which hold on which inputs, and
:func:`mechanisms` the quantities that explain them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from attnum.attention import flash_attention, golden_attention
from attnum.errors import bad_value
from attnum.numerics.formats import get_format
from attnum.workloads.inputs import InputSpec, make_qkv
from attnum.workloads.structured import LM_BATCH, LM_HEAD_DIM, LM_HEADS, LM_SEQ, STRUCTURED

_A = "sage1:{f}"
_B = "sage2-4b:{f},granularity=token,pv=fp16,pv_acc=fp32"
# (key, table, label, policy spec, published (CosSim %, rel L1, RMSE) or None)
SETTINGS = (
    ("sa1-int8-e4m3", "SA1 T2", "INT8 QK / E4M3 PV", _A + ",pv=e4m3fn,pv_acc=fp32", (99.94, 0.0345, 3.53e-3)),
    ("sa1-int8-e5m2", "SA1 T2", "INT8 QK / E5M2 PV", _A + ",pv=e5m2,pv_acc=fp32", (99.81, 0.0572, 6.11e-3)),
    ("sa1-int8-int8", "SA1 T2", "INT8 QK / INT8 PV", _A + ",pv=int8,pv_acc=fp32", (99.70, 0.1035, 6.82e-3)),
    ("sa1-e5m2-e5m2", "SA1 T2", "E5M2 QK / E5M2 PV", _A + ",qk=e5m2,pv=e5m2,pv_acc=fp32", (99.22, 0.1213, 1.20e-2)),
    ("sa1-fp16-acc16", "SA1 T4", "INT8 QK / FP16 PV, FP16 accumulator", _A, (99.98, 0.0156, 2.94e-3)),
    ("sa1-fp16-acc32", "SA1 T4", "INT8 QK / FP16 PV, FP32 accumulator", _A + ",pv_acc=fp32", (99.98, 0.0156, 2.94e-3)),
    ("sa2-none", "SA2 T4", "INT4 QK, no smoothing", _B + ",smooth_q=0,smooth_k=0", (80.04, 0.3906, 0.2223)),
    ("sa2-smooth-k", "SA2 T4", "INT4 QK, smooth K", _B + ",smooth_q=0", (98.07, 0.1493, 0.0743)),
    ("sa2-smooth-q", "SA2 T4", "INT4 QK, smooth Q", _B + ",smooth_k=0", (98.30, 0.1250, 0.0712)),
    ("sa2-smooth-qk", "SA2 T4", "INT4 QK, smooth Q+K (per token)", _B, (99.46, 0.0648, 0.0334)),
    ("sa2-thread", "SA2 T6", "INT4 QK smoothed, per thread", _B + ",granularity=thread", (99.45, 0.0622, 0.0313)),
    ("sa2-block", "SA2 T6", "INT4 QK smoothed, per block", _B + ",granularity=block", (98.03, 0.1492, 0.0744)),
    ("sa2-tensor", "SA2 T6", "INT4 QK smoothed, per tensor", _B + ",granularity=tensor", (97.15, 0.1800, 0.0865)),
    ("sa2-pv-e4m3", "SA2 T7", "INT4 QK smoothed, E4M3 PV", _B + ",pv=e4m3fn", (99.44, 0.0683, 0.0347)),
    ("sa2-pv-e5m2", "SA2 T7", "INT4 QK smoothed, E5M2 PV", _B + ",pv=e5m2", (99.20, 0.0905, 0.0903)),
    ("sa2-pv-int8", "SA2 T7", "INT4 QK smoothed, INT8 PV", _B + ",pv=int8", (77.05, 0.5618, 0.5044)),
    ("sage2", "attnum", "sage2 (INT8 per thread, E4M3 PV, FP22 acc, two-level)", "sage2:{f}", None),
    ("sage2-1lvl", "attnum", "sage2, FP22 accumulator one-level", "sage2:{f},two_level=0", None),
    ("sage3", "attnum", "sage3 (NVFP4 Q, K, P, V)", "sage3:{f}", None),
)
PUBLISHED = {key: pub for key, _, _, _, pub in SETTINGS}

# (claim id, source, statement, keys best-first; '~' between two keys: equal within 10% of their error)
ORDERINGS = (
    ("sa1-pv", "SA1 Table 2", "INT8/E4M3 beats INT8/INT8 beats E5M2/E5M2", ("sa1-int8-e4m3", "sa1-int8-int8",
                                                                          "sa1-e5m2-e5m2")),
    ("sa1-acc", "SA1 Table 4", "an FP16 P V accumulator is as accurate as FP32", ("sa1-fp16-acc16", "~",
                                                                                "sa1-fp16-acc32")),
    ("sa2-smooth", "SA2 Table 4", "smoothing Q+K beats K alone beats none", ("sa2-smooth-qk", "sa2-smooth-k",
                                                                              "sa2-none")),
    ("sa2-gran", "SA2 Table 6", "per-thread beats per-block beats per-tensor", ("sa2-thread", "sa2-block",
                                                                                "sa2-tensor")),
    ("sa2-pv", "SA2 Table 7", "E4M3 P V beats E5M2 beats INT8", ("sa2-pv-e4m3", "sa2-pv-e5m2", "sa2-pv-int8")),
)
DISTS = ("normal",) + STRUCTURED


@dataclass(frozen=True, kw_only=True)
class LowbitTableConfig:
    """Sizes of the synthetic inputs (``lm`` uses the trained model's own: 2 heads of 64, 128 tokens)."""

    seq_len: int = 1024
    heads: int = 2
    head_dim: int = 64
    batch: int = 1
    format: str = "fp16"
    dists: tuple[str, ...] = DISTS
    seed: int = 0

    def __post_init__(self) -> None:
        InputSpec(batch=self.batch, heads=self.heads, seq_len=self.seq_len, head_dim=self.head_dim)
        object.__setattr__(self, "format", get_format(self.format, param="format").name)
        if self.format not in ("fp16", "bf16"):
            raise bad_value("format", self.format, "fp16 or bf16 (SageAttention's input dtypes)")
        bad = [d for d in self.dists if d not in DISTS]
        if bad or not self.dists:
            raise bad_value("dists", ",".join(self.dists), f"a non-empty subset of {DISTS}")
        if self.head_dim % 16 or self.seq_len % 64:
            raise bad_value("head_dim/seq_len", (self.head_dim, self.seq_len), "head_dim a multiple of 16 (NVFP4 "
                            "blocks) and seq_len a multiple of 64 (SageAttention's K block)")

    def spec(self, dist: str) -> InputSpec:
        if dist == "lm":
            return InputSpec(batch=min(self.batch, LM_BATCH), heads=LM_HEADS, seq_len=LM_SEQ, head_dim=LM_HEAD_DIM,
                             dist="lm", seed=self.seed)
        return InputSpec(batch=self.batch, heads=self.heads, seq_len=self.seq_len, head_dim=self.head_dim, dist=dist,
                         seed=self.seed)


def metrics(o: torch.Tensor, gold: torch.Tensor) -> dict[str, float]:
    """SageAttention's three metrics of O' = ``o`` against O = ``gold``, flattened, in float64."""
    a, b = gold.double().flatten(), o.double().flatten()
    cos = float((a @ b) / math.sqrt(float(a @ a) * float(b @ b)))
    return {"cossim": cos, "rel_l1": float((a - b).abs().sum() / a.abs().sum()),
            "rmse": float((a - b).pow(2).mean().sqrt())}


def mechanisms(q, k, v, causal: bool) -> dict[str, float]:
    """What explains the orderings on these inputs: the channel bias smoothing removes (norm of the
    per-channel token mean over the RMS of what is left, for K and Q), and P's small entries: the
    fraction of P = exp(S - rowmax) below INT8's half step 1/254 (INT8 P rounds them to 0), and the
    share of each row's mass they carry (averaged over rows); the largest |Q| or |K| entry over the RMS
    (what a coarse scale granule must span)."""
    def bias(x):
        mu = x.mean(dim=-2, keepdim=True)
        return float(mu.pow(2).mean().sqrt() / (x - mu).pow(2).mean().sqrt())

    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -math.inf)
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    small = (p > 0) & (p < 1 / 254)
    mass = float(((p * small).sum(-1) / p.sum(-1)).mean())
    peak = float(max(x.abs().max() / x.pow(2).mean().sqrt() for x in (q, k)))
    return {"k_channel_bias": bias(k), "q_channel_bias": bias(q), "qk_peak_to_rms": peak,
            "p_below_int8_half_step": float(small.sum() / (p > 0).sum()), "p_mass_below_int8_half_step": mass}


def run_lowbit_table(cfg: LowbitTableConfig, progress: Callable[[int, int, str], None] | None = None) -> dict:
    """{"rows": one per (dist, setting), "mechanisms": per dist, "orderings": per claim and dist}.
    ``progress(done, total, label)`` is called before each setting (the CLI's "k of n" and ETA)."""
    from attnum.sweep.memory_budget import require_lowbit

    require_lowbit(batch=cfg.batch, heads=cfg.heads, seq_len=cfg.seq_len, head_dim=cfg.head_dim, what="lowbit-table",
                   lower="--seq-len, --heads or --head-dim")
    rows, mech = [], {}
    total = len(cfg.dists) * len(SETTINGS)
    for dist in cfg.dists:
        spec = cfg.spec(dist)
        q, k, v = make_qkv(spec)
        causal = dist == "lm"
        gold = golden_attention(q, k, v, is_causal=causal)
        mech[dist] = mechanisms(q, k, v, causal)
        for key, table, label, policy, pub in SETTINGS:
            if progress is not None:
                progress(len(rows), total, f"{dist}: {key}")
            t0 = time.perf_counter()
            o = flash_attention(q, k, v, policy=policy.format(f=cfg.format), is_causal=causal)
            rows.append({"dist": dist, "key": key, "table": table, "setting": label,
                         "policy": policy.format(f=cfg.format), **metrics(o, gold),
                         "published": dict(zip(("cossim_pct", "rel_l1", "rmse"), pub)) if pub else None,
                         "seconds": time.perf_counter() - t0})
    return {"rows": rows, "mechanisms": mech, "orderings": explain(orderings(rows, cfg.dists), mech)}


# The mechanism each claim rests on (the quantity printed beside its verdict per input).
WHY = {"sa1-pv": "p_mass_below_int8_half_step", "sa2-pv": "p_mass_below_int8_half_step",
       "sa2-smooth": ("k_channel_bias", "q_channel_bias"), "sa2-gran": "qk_peak_to_rms"}


def explain(ords: list[dict], mech: dict) -> list[dict]:
    """Each ordering with ``why``: per input, the value of the mechanism its claim rests on."""
    for o in ords:
        keys = WHY.get(o["claim_id"])
        keys = (keys,) if isinstance(keys, str) else keys or ()
        o["why"] = {d: {k: m[k] for k in keys} for d, m in mech.items()}
    return ords


def _err(row: dict) -> float:
    return 1.0 - row["cossim"]


def orderings(rows: list[dict], dists) -> list[dict]:
    """Each claim of :data:`ORDERINGS` judged per input distribution on 1 - CosSim."""
    by = {(r["dist"], r["key"]): r for r in rows}
    out = []
    for cid, source, claim, chain in ORDERINGS:
        per = {}
        for dist in dists:
            if chain[1] == "~":
                a, b = _err(by[dist, chain[0]]), _err(by[dist, chain[2]])
                per[dist] = abs(a - b) <= 0.1 * max(a, b)
                continue
            errs = [_err(by[dist, key]) for key in chain]
            per[dist] = all(x < y for x, y in zip(errs, errs[1:]))
        held = [d for d, ok in per.items() if ok]
        verdict = "holds" if len(held) == len(per) else "does not hold" if not held else "mixed"
        out.append({"claim_id": cid, "source": source, "claim": claim, "verdict": verdict,
                    "holds_on": held, "fails_on": [d for d, ok in per.items() if not ok]})
    return out


def table_meta(cfg: LowbitTableConfig) -> dict:
    return {"config": asdict(cfg), "reference": "float64 golden attention",
            "metrics": "CosSim, relative L1, RMSE of the flattened output (SageAttention's definitions)",
            "published": "SageAttention arXiv 2410.02367 Tables 2, 4 (model-layer averages); SageAttention2 "
                         "arXiv 2411.10958 Tables 4, 6, 7 (CogVideoX, all layers)"}
