"""The bias study's configuration: the runs it compares, its profiles, and :class:`BiasConfig`.

(Its own module so that the study and its training step, :mod:`.steps`, both read it without importing
each other.)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from attnum.errors import AttnumInputError, bad_value
from attnum.kernels.registry import require
from attnum.workloads.models import ModelConfig
from attnum.workloads.workloads import WorkloadConfig

RUNS = {
    "fp32": "flash:fp32",
    "uniform-bf16": "flash:uniform:bf16",
    "uniform-qy": "flash:uniform:bf16,max_shift=qiu-yao",
    "fa2-bf16": "flash:fa2:bf16",
}
REFERENCE = "fp32"
DATA = ("text", "repeat")
# Per-profile defaults; a BiasConfig field left None takes its profile's value.
PROFILES: dict[str, dict] = {
    "bias": dict(steps=2500, log_every=25, lr=1e-1, seq_len=64, batch_size=16, block_k=8, data="repeat", jobs=2),
    "bias-tiny": dict(steps=6, log_every=2, lr=1e-2, seq_len=16, batch_size=4, block_k=4, data="repeat", jobs=1),
}
# Kernel-level cases of the report's per-site table (attnum.studies.training.bias.sites), per profile.
SITE_CASES: dict[str, tuple[dict, ...]] = {
    "bias": (dict(dist="ties", seq_len=1024, block_k=16, logit_scale=0.1, causal=False),
             dict(dist="normal", seq_len=1024, block_k=16, logit_scale=0.1, causal=False)),
    "bias-tiny": (dict(dist="ties", seq_len=32, head_dim=8, block_k=8),),
}


@dataclass(frozen=True, kw_only=True)
class BiasConfig:
    """Fields map onto ``attnum diverge --profile bias`` flags; None takes the profile's value."""

    profile: str = "bias"
    steps: int | None = None
    log_every: int | None = None
    lr: float | None = None
    seq_len: int | None = None
    batch_size: int | None = None
    block_k: int | None = None
    data: str | None = None
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    runs: tuple[str, ...] = tuple(RUNS)
    init_seed: int = 0
    data_seed: int = 0
    jobs: int | None = None
    out: Path = Path("runs/bias")

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise bad_value("profile", self.profile, " | ".join(PROFILES))
        for f in fields(self):
            if getattr(self, f.name) is None:
                object.__setattr__(self, f.name, PROFILES[self.profile][f.name])
        for name in ("steps", "log_every", "seq_len", "batch_size", "block_k", "jobs"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise AttnumInputError(f"{name}={v!r} is not allowed; expected a positive integer")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise AttnumInputError(f"lr={self.lr!r} is not allowed; expected a positive number")
        if self.data not in DATA:
            raise bad_value("data", self.data, " | ".join(DATA))
        unknown = [r for r in self.runs if r not in RUNS]
        if unknown or REFERENCE not in self.runs:
            raise bad_value("runs", self.runs, f"names from {list(RUNS)}, including {REFERENCE!r}")
        ModelConfig(d_model=self.d_model, n_heads=self.n_heads, n_layers=self.n_layers)
        for name in self.runs:  # fail before any training: every attention resolves here
            require(RUNS[name], "cpu", block_k=self.block_k, param="attention")

    def workload(self) -> WorkloadConfig:
        return WorkloadConfig(name="lm", model=ModelConfig(d_model=self.d_model, n_heads=self.n_heads,
                                                           n_layers=self.n_layers),
                              batch_size=self.batch_size, seq_len=self.seq_len)

    def jsonable(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                for k, v in asdict(self).items()}
