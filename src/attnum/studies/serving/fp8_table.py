"""FlashAttention-3's FP8 numerics comparison (Shah et al. 2024, arXiv 2407.08608, Sec. 4.3, Table 3),
re-run on attnum's emulation.

Inputs: Q, K, V ~ N(0, 1) + N(0, 100) * Bernoulli(0.001) (attnum.workloads.inputs "outlier"), float64; each
setting's output against the float64 golden value of the same inputs, RMSE over all elements.

Settings (attnum's models of them; see docs/fp8-mla.md):
- baseline FP16: materialized attention, every intermediate in fp16 (``uniform:fp16``, fp32 GEMM accumulation);
- FA2 FP16 / FA3 FP16: the tiled online softmax with fp32 intermediates (``fa2:fp16``); FA3 differs from
  FA2 in scheduling only, so the emulation gives both the same number;
- baseline FP8: per-tensor scales, materialized softmax in fp32, normalized P cast to e4m3
  (:func:`fp8_baseline_attention`);
- FA3 FP8: block quantization + incoherent processing (:func:`fp8_attention`), and without each.

The paper's digits are its own, from Table 3 of arXiv 2407.08608; its abstract states the 2.6x ratio
of baseline FP8 to FA3 FP8 error.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from attnum.attention import baseline_attention, flash_attention, golden_attention
from attnum.attention.lowbit.quant import fp8_attention, fp8_baseline_attention, quant_format
from attnum.errors import bad_value
from attnum.numerics.metrics import deviation
from attnum.workloads.inputs import InputSpec, make_qkv

# (key, label, paper RMSE or None)
SETTINGS = (
    ("baseline-fp16", "Baseline FP16", 3.2e-4),
    ("fa2-fp16", "FA2 FP16", 1.9e-4),
    ("fa3-fp16", "FA3 FP16", 1.9e-4),
    ("baseline-fp8", "Baseline FP8 (per-tensor)", 2.4e-2),
    ("fa3-fp8", "FA3 FP8 (block quantization + incoherent processing)", 9.1e-3),
    ("fa3-fp8-no-block", "FA3 FP8 without block quantization", 9.3e-3),
    ("fa3-fp8-no-incoherent", "FA3 FP8 without incoherent processing", 2.4e-2),
    ("fa3-fp8-neither", "FA3 FP8 without either (per-tensor, no rotation)", None),
    ("baseline-fp8-incoherent", "Baseline FP8 with incoherent processing", None),
)
PAPER_RATIO = 2.6  # abstract: "2.6x lower numerical error than a baseline FP8 attention"


@dataclass(frozen=True, kw_only=True)
class FP8TableConfig:
    """Reduced in size from the paper's setting to fit a minute on 2 cores."""

    seq_len: int = 2048
    heads: int = 4
    head_dim: int = 128
    batch: int = 1
    fmt: str = "e4m3fn"
    block: int = 128
    seed: int = 0
    fp16: bool = True
    mma: str | None = None  # every GEMM as this architecture's tensor cores (attnum.numerics.mma.sites)

    def __post_init__(self) -> None:
        from attnum.numerics.mma.sites import check_arch

        object.__setattr__(self, "mma", check_arch(self.mma, param="mma"))
        if self.mma is not None:  # the table's GEMMs are FP8: refuse an architecture without them before any work
            from attnum.numerics.mma.arch import get_arch

            get_arch(self.mma).instruction("fp8")
        InputSpec(batch=self.batch, heads=self.heads, seq_len=self.seq_len, head_dim=self.head_dim, seed=self.seed)
        object.__setattr__(self, "fmt", quant_format(self.fmt))
        if self.fmt == "int8":
            raise bad_value("fmt", self.fmt, "e4m3fn or e5m2")
        if self.head_dim & (self.head_dim - 1):
            raise bad_value("head_dim", self.head_dim, "a power of two (the Hadamard rotation)")
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1:
            raise bad_value("block", self.block, "a positive integer")


def run_fp8_table(cfg: FP8TableConfig) -> list[dict]:
    """One row per setting: key, label, rmse (attnum), paper_rmse, ratio_to_fa3 for both, seconds."""
    q, k, v = make_qkv(InputSpec(batch=cfg.batch, heads=cfg.heads, seq_len=cfg.seq_len, head_dim=cfg.head_dim,
                                 dist="outlier", seed=cfg.seed))
    gold = golden_attention(q, k, v)
    f, b, mm = cfg.fmt, cfg.block, cfg.mma
    tc = f",mma={mm}" if mm else ""
    runs = {
        "baseline-fp16": lambda: baseline_attention(q, k, v, policy=f"uniform:fp16{tc}"),
        "fa2-fp16": lambda: flash_attention(q, k, v, policy=f"fa2:fp16{tc}", block_k=b),
        "baseline-fp8": lambda: fp8_baseline_attention(q, k, v, fmt=f, mma=mm),
        "fa3-fp8": lambda: fp8_attention(q, k, v, fmt=f, block=b, granularity="block", incoherent=True, seed=cfg.seed,
                                         mma=mm),
        "fa3-fp8-no-block": lambda: fp8_attention(q, k, v, fmt=f, block=b, granularity="tensor", incoherent=True,
                                                  seed=cfg.seed, mma=mm),
        "fa3-fp8-no-incoherent": lambda: fp8_attention(q, k, v, fmt=f, block=b, granularity="block", incoherent=False,
                                                       mma=mm),
        "fa3-fp8-neither": lambda: fp8_attention(q, k, v, fmt=f, block=b, granularity="tensor", incoherent=False,
                                                 mma=mm),
        "baseline-fp8-incoherent": lambda: fp8_baseline_attention(q, k, v, fmt=f, incoherent=True, seed=cfg.seed,
                                                                  mma=mm),
    }
    rows, done = [], {}
    for key, label, paper in SETTINGS:
        if key.endswith("fp16") and not cfg.fp16:
            continue
        t0 = time.perf_counter()
        if key == "fa3-fp16":  # the same arithmetic as FA2 in this emulation
            rmse = done["fa2-fp16"]
        else:
            rmse = done[key] = deviation(runs[key](), gold)["rmse"]
        rows.append({"key": key, "setting": label, "rmse": rmse, "paper_rmse": paper,
                     "seconds": time.perf_counter() - t0})
    fa3 = done["fa3-fp8"]
    paper_fa3 = dict((s[0], s[2]) for s in SETTINGS)["fa3-fp8"]
    for r in rows:
        r["ratio_to_fa3_fp8"] = r["rmse"] / fa3 if fa3 else None
        r["paper_ratio_to_fa3_fp8"] = r["paper_rmse"] / paper_fa3 if r["paper_rmse"] else None
    return rows


def table_meta(cfg: FP8TableConfig) -> dict:
    return {"config": asdict(cfg), "inputs": "N(0,1) + N(0,100) * Bernoulli(0.001), float64",
            "reference": "float64 golden attention", "paper": "Shah et al. 2024, arXiv 2407.08608, Table 3",
            "paper_ratio_baseline_to_fa3_fp8": PAPER_RATIO}
