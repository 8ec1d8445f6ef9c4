"""Validate the re-implementation against PyTorch's CPU flash kernel, as the paper validated its
own against the real FlashAttention kernel.

The emulation runs under ``torch-cpu:<fmt>`` with the CPU kernel's tiles
(aten/src/ATen/native/cpu/FlashAttentionKernel.cpp: q_split 32/64/256 for N < 192 / < 768 / else,
kv_split 512), on inputs already in the kernel's dtype, and both outputs are compared in ULPs of
that dtype. Residual differences come from what the emulator does not model: the kernel's
vectorized exp approximation and the GEMM's internal summation order.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnum.attention import flash_attention, golden_attention
from attnum.errors import AttnumInputError, bad_value
from attnum.kernels import get_kernel
from attnum.numerics.formats import get_format, torch_dtype
from attnum.numerics.metrics import deviation
from attnum.numerics.policy import torch_cpu
from attnum.workloads.inputs import InputSpec, make_qkv

CPU_KV_SPLIT = 512
# The formats the torch-cpu policy models the CPU flash kernel for (it computes in fp32).
FORMATS = ("bf16", "fp16", "fp32")


def torch_cpu_q_split(N: int) -> int:
    return 32 if N < 192 else 64 if N < 768 else 256


@dataclass(frozen=True, kw_only=True)
class ValidateConfig:
    formats: tuple[str, ...] = ("bf16", "fp16", "fp32")
    seq_lens: tuple[int, ...] = (256, 512, 1024, 2048)
    heads: int = 4
    head_dim: int = 64
    causal: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "formats", tuple(_format_name(f) for f in self.formats))
        for n in self.seq_lens:
            InputSpec(seq_len=n)
        InputSpec(heads=self.heads, head_dim=self.head_dim)


def _format_name(fmt: str) -> str:
    """The canonical name of one of :data:`FORMATS`, aliases (bfloat16, half, ...) included."""
    try:
        name = get_format(fmt).name
    except AttnumInputError:
        name = None
    if name not in FORMATS:
        raise bad_value("format", fmt, f"one of {FORMATS} (or an alias such as bfloat16, half)")
    return name


def validate_point(fmt: str, N: int, cfg: ValidateConfig) -> dict:
    """One (format, N): emulation vs the real kernel in ULPs, and each against float64 golden."""
    dtype = torch_dtype(fmt)
    q, k, v = (x.to(dtype) for x in make_qkv(InputSpec(heads=cfg.heads, seq_len=N, head_dim=cfg.head_dim,
                                                        seed=cfg.seed)))
    real = get_kernel("torch-sdpa-flash").fn(q, k, v, is_causal=cfg.causal).double()
    emu = flash_attention(q, k, v, is_causal=cfg.causal, policy=torch_cpu(fmt),
                          block_q=torch_cpu_q_split(N), block_k=CPU_KV_SPLIT).double()
    gold = golden_attention(q, k, v, is_causal=cfg.causal)
    vs = deviation(emu, real, fmt=fmt)
    return {
        "format": fmt,
        "seq_len": N,
        "kv_tiles": -(-N // CPU_KV_SPLIT),
        "max_ulp": vs["max_ulp"],
        "mean_ulp": vs["mean_ulp"],
        "identical": (emu == real).double().mean().item(),
        "emulation_vs_golden": deviation(emu, gold)["max_abs"],
        "kernel_vs_golden": deviation(real, gold)["max_abs"],
    }


def run_validate(cfg: ValidateConfig) -> list[dict]:
    from attnum.sweep.memory_budget import require_validate

    require_validate(cfg)
    return [validate_point(fmt, N, cfg) for fmt in cfg.formats for N in cfg.seq_lens]
