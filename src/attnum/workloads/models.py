"""Tiny transformers that train on a CPU in minutes, with attention in every block.

The attention call goes through one SDPA-signature callable per model (flax's ``attention_fn``
pattern), so the paper's runs swap baseline and flash attention without touching the model code.

- ``DigitsDiT``: a caption-conditioned diffusion transformer for 8x8 digits. Caption tokens and 2x2
  image patches are concatenated and attend jointly (MMDiT-style), so every block mixes text and image.
- ``ByteLM``: a byte-level causal language model.

Shapes: B batch, T tokens, D model width, H heads, d head dim, P pixels, L caption tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnum.errors import AttnumInputError

SdpaFn = Callable[..., torch.Tensor]


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    mlp_ratio: int = 2

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "n_layers", "mlp_ratio"):
            if getattr(self, name) <= 0:
                raise AttnumInputError(f"{name}={getattr(self, name)!r} is not allowed; expected a positive integer")
        if self.d_model % self.n_heads:
            raise AttnumInputError(f"d_model={self.d_model} is not allowed; expected a multiple of n_heads={self.n_heads}")


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attention_fn: SdpaFn = F.scaled_dot_product_attention

    def forward(self, x_BTD: torch.Tensor, *, is_causal: bool) -> torch.Tensor:
        B, T, D = x_BTD.shape
        q, k, v = self.qkv(x_BTD).view(B, T, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        o_BHTd = self.attention_fn(q, k, v, is_causal=is_causal)
        return self.proj(o_BHTd.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model),
            nn.GELU(),
            nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model),
        )

    def forward(self, x_BTD: torch.Tensor, *, is_causal: bool) -> torch.Tensor:
        x_BTD = x_BTD + self.attn(self.ln1(x_BTD), is_causal=is_causal)
        return x_BTD + self.mlp(self.ln2(x_BTD))


def set_attention(model: nn.Module, attention_fn: SdpaFn) -> None:
    """Route every attention call of ``model`` through ``attention_fn`` (SDPA signature)."""
    for m in model.modules():
        if isinstance(m, SelfAttention):
            m.attention_fn = attention_fn


def _timestep_embedding(t_B: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t_B.to(torch.float32)[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class DigitsDiT(nn.Module):
    """Predicts the noise added to an 8x8 digit, given the timestep and a 4-word caption."""

    PATCH = 2
    SIDE = 8

    def __init__(self, cfg: ModelConfig, *, vocab_size: int, caption_len: int) -> None:
        super().__init__()
        n_patches = (self.SIDE // self.PATCH) ** 2
        self.cfg = cfg
        self.patch_in = nn.Linear(self.PATCH * self.PATCH, cfg.d_model)
        self.img_pos = nn.Parameter(0.02 * torch.randn(n_patches, cfg.d_model))
        self.tok_emb = nn.Embedding(vocab_size, cfg.d_model)
        self.txt_pos = nn.Parameter(0.02 * torch.randn(caption_len, cfg.d_model))
        self.t_mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_model), nn.SiLU(), nn.Linear(cfg.d_model, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.patch_out = nn.Linear(cfg.d_model, self.PATCH * self.PATCH)

    def _patchify(self, x_BP: torch.Tensor) -> torch.Tensor:
        B, p, s = x_BP.shape[0], self.PATCH, self.SIDE
        return x_BP.view(B, s // p, p, s // p, p).permute(0, 1, 3, 2, 4).reshape(B, (s // p) ** 2, p * p)

    def _unpatchify(self, x_BNp: torch.Tensor) -> torch.Tensor:
        B, p, s = x_BNp.shape[0], self.PATCH, self.SIDE
        return x_BNp.view(B, s // p, s // p, p, p).permute(0, 1, 3, 2, 4).reshape(B, s * s)

    def forward(self, xt_BP: torch.Tensor, t_B: torch.Tensor, tokens_BL: torch.Tensor) -> torch.Tensor:
        temb_BD = self.t_mlp(_timestep_embedding(t_B, self.cfg.d_model))
        img = self.patch_in(self._patchify(xt_BP)) + self.img_pos
        txt = self.tok_emb(tokens_BL) + self.txt_pos
        x_BTD = torch.cat([txt, img], dim=1) + temb_BD[:, None, :]
        for blk in self.blocks:
            x_BTD = blk(x_BTD, is_causal=False)
        img_out = self.patch_out(self.ln_f(x_BTD[:, tokens_BL.shape[1] :]))
        return self._unpatchify(img_out)


class ByteLM(nn.Module):
    def __init__(self, cfg: ModelConfig, *, seq_len: int, vocab_size: int = 256) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab_size, cfg.d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(seq_len, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, vocab_size)

    def forward(self, inputs_BT: torch.Tensor) -> torch.Tensor:
        x_BTD = self.emb(inputs_BT) + self.pos[: inputs_BT.shape[1]]
        for blk in self.blocks:
            x_BTD = blk(x_BTD, is_causal=True)
        return self.head(self.ln_f(x_BTD))
