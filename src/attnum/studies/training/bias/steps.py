"""One training step of the bias study, in pieces: the batch, the attention weights and their
parts, gradients under an attention, global-norm clipping and the Adam update, signed-error summaries."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from attnum.workloads.data import step_generator
from attnum.workloads.models import set_attention
from attnum.workloads.workloads import Workload

if TYPE_CHECKING:
    from attnum.studies.training.bias.config import BiasConfig

BETAS, EPS, CLIP = (0.9, 0.999), 1e-8, 1.0  # torch AdamW defaults and loop.py's clip


def batch(cfg: BiasConfig, workload: Workload, step: int) -> dict:
    """The LM batch of ``step``; ``repeat`` data tiles a 2-8 byte snippet of the text over each
    window, so equal tokens recur at many positions (near-equal scores: tie-heavy attention)."""
    b = workload.batch(data_seed=cfg.data_seed, step=step)
    if cfg.data == "text":
        return b
    g = step_generator(cfg.data_seed + 7919, step)
    rows = torch.cat([b["inputs_BT"], b["targets_BT"][:, -1:]], dim=1)  # (B, T + 1)
    periods = torch.randint(2, 9, (rows.shape[0],), generator=g).tolist()
    T1 = rows.shape[1]
    tiled = torch.stack([r[:p].repeat(T1 // p + 1)[:T1] for r, p in zip(rows, periods)])
    return {"inputs_BT": tiled[:, :-1], "targets_BT": tiled[:, 1:]}


def attention_weights(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """{"blocks.i.attn.qkv": param, "blocks.i.attn.proj": param} (weights only, not biases)."""
    return {n: p for n, p in model.named_parameters() if n.endswith(("attn.qkv.weight", "attn.proj.weight"))}


def split(name: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
    """A qkv weight (3D, D) as W_q, W_k, W_v (D, D) each; a proj weight as W_o."""
    layer = name.split(".")[1]
    if name.endswith("qkv.weight"):
        return {f"L{layer}.{w}": part for w, part in zip("qkv", t.chunk(3, dim=0))}
    return {f"L{layer}.o": t}


def _grads(model, workload, b, fn) -> tuple[float, dict[str, torch.Tensor]]:
    set_attention(model, fn)
    model.zero_grad(set_to_none=True)
    loss = workload.loss(model, b)
    loss.backward()
    return float(loss.detach()), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _clip_coef(grads: dict[str, torch.Tensor]) -> float:
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
    return min(1.0, CLIP / (float(total) + 1e-6))  # torch.nn.utils.clip_grad_norm_'s coefficient


def adam_update(g: torch.Tensor, state: dict, lr: float) -> torch.Tensor:
    """The AdamW (weight decay 0) update that gradient ``g`` makes from moments ``state``."""
    b1, b2 = BETAS
    t = int(state.get("step", 0)) + 1
    m = state["exp_avg"] * b1 + g * (1 - b1) if state else g * (1 - b1)
    v = state["exp_avg_sq"] * b2 + g * g * (1 - b2) if state else g * g * (1 - b2)
    return -(lr / (1 - b1 ** t)) * m / (v.sqrt() / math.sqrt(1 - b2 ** t) + EPS)


def _signed(e: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float]:
    e, ref = e.double(), ref.double()
    signed = float((e * ref.sign()).mean())
    mean_abs = float(e.abs().mean())
    rel = float(e.norm() / ref.norm()) if float(ref.norm()) > 0 else (0.0 if mean_abs == 0 else math.inf)
    return signed, (signed / mean_abs if mean_abs else 0.0), rel
