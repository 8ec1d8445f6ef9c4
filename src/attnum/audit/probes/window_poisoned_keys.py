"""A sliding window must not read the keys outside it: those keys carry the largest scores here.

Local attention (Mistral, Gemma-2/3, gpt-oss) passes ``window_size=(left, right)`` (flash-attn's
convention; :mod:`attnum.kernels.conventions`). A kernel that skips the window on some path (a tile,
a split, a decode branch, a mis-aligned offset: vllm-project/vllm PR #30887 fixed a Triton attention
path that read outside the window) mixes in keys the model never attends to. Every key outside a
query's window has a larger score than every key inside it (scores grow by 1/2 per step away from the
query on the poisoned side) and its own V, so a read of one moves the output by O(|V|). Cases: causal
windows W = 1, 16, 33 (``window_size=(W - 1, 0)``, ``is_causal=True``), two-sided (8, 8) with either
side poisoned, and N < S under the target's causal alignment. The reference is golden attention with
the window as a bool mask. Only targets declaring ``attnum_window = True`` are asked.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.features import feature_case, undeclared
from attnum.audit.harness import Case, Probe, ProbeContext

D = 64
STEP = 0.5  # scaled-score step per key: a leaked key outweighs the window's best one by exp(STEP) or more


def keep_mask(n: int, s: int, window: tuple[int, int], is_causal: bool, alignment: str) -> torch.Tensor:
    """(n, s) bool: True where query i sees key j under ``window`` (flash-attn's window_size)."""
    left, right = window
    off = s - n if alignment == "bottom_right" else 0
    i = torch.arange(n)[:, None] + off
    j = torch.arange(s)[None, :]
    keep = torch.ones(n, s, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if is_causal or right >= 0:
        keep &= j <= i + (0 if is_causal else right)
    return keep


def _case(ctx: ProbeContext, label: str, n: int, s: int, window, is_causal: bool, poison: str) -> Case:
    """Scores rise by STEP per key towards the poisoned side ("left": early keys, "right": late keys)."""
    scale = 1.0 / math.sqrt(D)
    j = torch.arange(s, dtype=torch.float64)
    height = (s - 1 - j) if poison == "left" else j
    q = torch.zeros(n, D, dtype=torch.float64)
    k = 0.05 * ctx.randn(s, D, salt=2)
    q[:, 0] = 1.0
    k[:, 0] = STEP * height / scale
    q[:, 1:] += 0.05 * ctx.randn(n, D - 1, salt=1)
    q, k, v = ctx.cast(q, k, 4.0 * ctx.randn(s, D, salt=3))
    q, k, v = q.view(1, 1, n, D), k.view(1, 1, s, D), v.view(1, 1, s, D)
    keep = keep_mask(n, s, window, is_causal, ctx.causal_alignment).view(1, 1, n, s)
    return feature_case(ctx, label, (q, k, v), {"is_causal": is_causal, "window_size": window},
                        (q, k, v), {"attn_mask": keep})


def run(ctx: ProbeContext) -> list[Case]:
    missing = undeclared(ctx, "window", "window_size=(left, right)")
    if missing is not None:
        return [missing]
    cases = []
    for w in (1, 16, 33):
        cases.append(_case(ctx, f"causal window {w}, N = S = 96", 96, 96, (w - 1, 0), True, "left"))
    for side in ("left", "right"):
        cases.append(_case(ctx, f"window (8, 8), {side} side poisoned", 80, 80, (8, 8), False, side))
    cases.append(_case(ctx, f"causal window 16, N = 24 < S = 96 ({ctx.causal_alignment})", 24, 96, (15, 0), True,
                       "left"))
    return cases


PROBE = Probe(
    name="window-poisoned-keys",
    summary="sliding window_size=(left, right): keys outside it score highest; a read of one fails",
    refs=("vllm-project/vllm PR #30887", "Dao-AILab/flash-attention window_size"),
    run=run,
)
