"""Validate the ``torch-eager:<fmt>`` policy against PyTorch eager attention on CPU.

As :mod:`attnum.studies.validation.validate` does for the flash kernel: the emulated baseline under
``torch-eager:<fmt>`` and eager attention run op by op in that dtype
(:func:`attnum.attention.eager.eager_attention`, ``softmax(Q K^T * scale) V``) see the same inputs,
already in the dtype, and are compared in ULPs of it. For contrast the same comparison is made for
the ``uniform`` and ``fa2`` policies, which model other kernels: a policy that models eager
attention must match it far more often than they do. Residual differences come from what is not
modelled: torch's GEMM summation order and its vectorised exp.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnum.attention import baseline_attention, golden_attention
from attnum.attention.eager import eager_attention
from attnum.errors import bad_value
from attnum.numerics.formats import get_format, torch_dtype
from attnum.numerics.metrics import deviation
from attnum.numerics.policy import parse_policy
from attnum.numerics.rounding import round_to
from attnum.workloads.inputs import InputSpec, make_qkv

FORMATS = ("bf16", "fp16", "fp32")
CONTRAST = ("uniform", "fa2")


@dataclass(frozen=True, kw_only=True)
class EagerValidateConfig:
    formats: tuple[str, ...] = FORMATS
    seq_lens: tuple[int, ...] = (256, 1024, 2048)
    heads: int = 4
    head_dim: int = 64  # scale 1/8: a power of two, which the policy models exactly
    causal: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        names = tuple(get_format(f).name for f in self.formats)
        for f, name in zip(self.formats, names):
            if name not in FORMATS:
                raise bad_value("format", f, f"one of {FORMATS}")
        object.__setattr__(self, "formats", names)
        for n in self.seq_lens:
            InputSpec(seq_len=n)
        InputSpec(heads=self.heads, head_dim=self.head_dim)


def validate_eager_point(fmt: str, N: int, cfg: EagerValidateConfig) -> dict:
    """One (format, N): torch-eager emulation vs eager attention, and each against float64 golden."""
    dtype = torch_dtype(fmt)
    q, k, v = (round_to(x, fmt).to(dtype) for x in make_qkv(InputSpec(heads=cfg.heads, seq_len=N, head_dim=cfg.head_dim,
                                                        seed=cfg.seed)))
    real = eager_attention(q, k, v, is_causal=cfg.causal).double()
    emu = baseline_attention(q, k, v, is_causal=cfg.causal, policy=parse_policy(f"torch-eager:{fmt}")).double()
    gold = golden_attention(q, k, v, is_causal=cfg.causal)
    vs = deviation(emu, real, fmt=fmt)
    row = {
        "format": fmt,
        "seq_len": N,
        "max_ulp": vs["max_ulp"],
        "mean_ulp": vs["mean_ulp"],
        "identical": (emu == real).double().mean().item(),
        "emulation_vs_golden": deviation(emu, gold)["max_abs"],
        "eager_vs_golden": deviation(real, gold)["max_abs"],
    }
    for name in CONTRAST:
        other = baseline_attention(q, k, v, is_causal=cfg.causal, policy=parse_policy(f"{name}:{fmt}")).double()
        row[f"identical_{name}"] = (other == real).double().mean().item()
    return row


def run_validate_eager(cfg: EagerValidateConfig) -> list[dict]:
    from attnum.sweep.memory_budget import require_validate

    require_validate(cfg, eager=True)
    return [validate_eager_point(fmt, N, cfg) for fmt in cfg.formats for N in cfg.seq_lens]
