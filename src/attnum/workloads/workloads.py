"""The two training workloads: what a batch is, how the model is built, what the loss is.

Each workload pairs a bundled dataset (``attnum.workloads.data``) with a tiny model
(``attnum.workloads.models``) and a loss. Batches depend only on ``(data_seed, step)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

from attnum.errors import AttnumInputError, bad_value
from attnum.workloads.data import CAPTION_LEN, CAPTION_VOCAB, DigitsData, TextData
from attnum.workloads.models import ByteLM, DigitsDiT, ModelConfig

WORKLOADS = ("digits", "lm")


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    """``name`` is ``digits`` (caption-conditioned diffusion) or ``lm`` (byte-level causal LM)."""

    name: str = "digits"
    model: ModelConfig = field(default_factory=ModelConfig)
    batch_size: int = 64
    seq_len: int = 32  # lm only
    diffusion_steps: int = 200  # digits only

    def __post_init__(self) -> None:
        if self.name not in WORKLOADS:
            raise bad_value("workload", self.name, " | ".join(WORKLOADS))
        for name in ("batch_size", "seq_len", "diffusion_steps"):
            if getattr(self, name) <= 0:
                raise AttnumInputError(f"{name}={getattr(self, name)!r} is not allowed; expected a positive integer")


class Workload:
    def __init__(self, cfg: WorkloadConfig) -> None:
        self.cfg = cfg

    @cached_property
    def _data(self):
        return DigitsData.load() if self.cfg.name == "digits" else TextData.load()

    @cached_property
    def _alpha_bar_T(self) -> torch.Tensor:
        # DDPM's linear beta schedule (Ho et al. 2020), shortened to diffusion_steps.
        betas = torch.linspace(1e-4, 0.02 * 1000 / self.cfg.diffusion_steps, self.cfg.diffusion_steps)
        return torch.cumprod(1.0 - betas.clamp(max=0.999), dim=0)

    def build_model(self) -> nn.Module:
        if self.cfg.name == "digits":
            return DigitsDiT(self.cfg.model, vocab_size=len(CAPTION_VOCAB), caption_len=CAPTION_LEN)
        return ByteLM(self.cfg.model, seq_len=self.cfg.seq_len)

    def batch(self, *, data_seed: int, step: int) -> dict:
        if self.cfg.name == "digits":
            return self._data.batch(data_seed=data_seed, step=step, batch_size=self.cfg.batch_size,
                                    diffusion_steps=self.cfg.diffusion_steps)
        return self._data.batch(data_seed=data_seed, step=step, batch_size=self.cfg.batch_size,
                                seq_len=self.cfg.seq_len)

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        if self.cfg.name == "digits":
            ab_B = self._alpha_bar_T[batch["t_B"]][:, None]
            xt_BP = ab_B.sqrt() * batch["x0_BP"] + (1 - ab_B).sqrt() * batch["noise_BP"]
            pred_BP = model(xt_BP, batch["t_B"], batch["tokens_BL"])
            return F.mse_loss(pred_BP.float(), batch["noise_BP"])
        logits_BTV = model(batch["inputs_BT"])
        return F.cross_entropy(logits_BTV.float().flatten(0, 1), batch["targets_BT"].flatten())
