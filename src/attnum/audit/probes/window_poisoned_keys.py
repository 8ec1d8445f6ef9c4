"""A sliding window must not read the keys outside it: those keys carry the largest scores here, then NaN.

Local attention (Mistral, Gemma-2/3, gpt-oss) passes ``window_size=(left, right)`` (flash-attn's
convention; :mod:`attnum.kernels.conventions`). A kernel that skips the window on some path (a tile,
a split, a decode branch, a mis-aligned offset) mixes in keys the model never attends to. Every key outside a
query's window has a larger score than every key inside it (scores grow by 1/2 per step away from the
query on the poisoned side) and its own V, so a read of one moves the output by O(|V|). Cases: causal
windows W = 1, 16, 33 (``window_size=(W - 1, 0)``, ``is_causal=True``), two-sided (8, 8) with either
side poisoned, and N < S under the target's causal alignment.

Then the memory a window frees: serving engines release the pages wholly before a sequence's window
(vLLM's sliding-window block manager hands them back; what they hold next is anyone's). A kernel that
masks those keys' scores but still loads their V and multiplies it by P = 0 turns a NaN there into a NaN
output: vllm-project/vllm PR #30887 fixed exactly this in vLLM's Triton unified attention (0.13 -> 0.14),
which iterated every tile from the first and loaded V outside the window. So the keys that no query of the
call may see hold NaN, in K alone and then in V alone (a kernel that masks one load and not the other is
caught where the NaN gets through): SDPA with N < S, causal and two-sided, and -- when the target's decode
entry takes the window -- paged decode, N = 1 with one and two splits and N = 4, every key before the
window NaN. Any NaN in the output fails. The reference is golden attention with the window as a bool mask
(the planted keys zero there: they are masked). Only targets declaring ``attnum_window = True`` are asked.
"""

from __future__ import annotations

import math

import torch

from attnum.audit.construct import plant, poisons
from attnum.audit.features import decode_feature_cases, decode_refusal, feature_case, undeclared
from attnum.audit.harness import Case, Probe, ProbeContext

D = 64
STEP = 0.5  # scaled-score step per key: a leaked key outweighs the window's best one by exp(STEP) or more
DECODE_W, DECODE_LENS = 16, (50, 37)  # causal window and lengths of the decode cases (P = 16)


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


def _case(ctx: ProbeContext, label: str, n: int, s: int, window, is_causal: bool, poison: str,
          nan_in: str | None = None) -> Case:
    """Scores rise by STEP per key towards the poisoned side ("left": early keys, "right": late keys);
    ``nan_in``: also NaN in K or V (:func:`attnum.audit.construct.poisons`) at every key no query may see."""
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
    keep = keep_mask(n, s, window, is_causal, ctx.causal_alignment)
    call = (q, k, v)
    if nan_in is not None:
        call = (q, *plant(k, v, ~keep.any(0), nan_in))
    return feature_case(ctx, label, call, {"is_causal": is_causal, "window_size": window},
                        (q, k, v), {"attn_mask": keep.view(1, 1, n, s)})


def run(ctx: ProbeContext) -> list[Case]:
    missing = undeclared(ctx, "window", "window_size=(left, right)")
    return ([missing] if missing is not None else _sdpa_cases(ctx)) + _decode_cases(ctx)


def _sdpa_cases(ctx: ProbeContext) -> list[Case]:
    cases = []
    for w in (1, 16, 33):
        cases.append(_case(ctx, f"causal window {w}, N = S = 96", 96, 96, (w - 1, 0), True, "left"))
    for side in ("left", "right"):
        cases.append(_case(ctx, f"window (8, 8), {side} side poisoned", 80, 80, (8, 8), False, side))
    cases.append(_case(ctx, f"causal window 16, N = 24 < S = 96 ({ctx.causal_alignment})", 24, 96, (15, 0), True,
                       "left"))
    for which in poisons():
        cases.append(_case(ctx, f"causal window 16, N = 24 < S = 96, NaN in {which} outside every window", 24, 96,
                           (15, 0), True, "left", nan_in=which))
        cases.append(_case(ctx, f"window (8, 8), N = 24 < S = 96, NaN in {which} outside every window", 24, 96,
                           (8, 8), False, "left", nan_in=which))
    return cases


def _decode_cases(ctx: ProbeContext) -> list[Case]:
    """Paged decode with a causal window of DECODE_W keys; every key before each sequence's window is NaN."""
    refused = decode_refusal(ctx, "window")
    if refused is not None:
        return refused
    window = (DECODE_W - 1, 0)

    def rewrite(q, k, v):  # one sequence: the window as a bool mask (bottom-right), the planted keys zeroed
        keep = keep_mask(q.shape[2], k.shape[2], window, True, "bottom_right")
        return (q, k, v), {"attn_mask": keep.view(1, 1, *keep.shape)}, None

    cases = []
    for N, n_splits in ((1, 1), (1, 2), (4, 1)):
        q = ctx.randn(2, 4, N, D, salt=20 + N)
        k, v = ctx.randn(2, 2, 64, D, salt=21 + N), ctx.randn(2, 2, 64, D, salt=22 + N)
        q, k, v = ctx.cast(q, k, v)
        lens = torch.tensor(DECODE_LENS)
        for which in poisons():
            kk, vv = k.clone(), v.clone()
            for b, L in enumerate(DECODE_LENS):  # before the window of the sequence's first query
                dead = torch.arange(64) < L - N - DECODE_W + 1
                kk[b:b + 1], vv[b:b + 1] = plant(k[b:b + 1], v[b:b + 1], dead, which)
            label = f"decode N={N} causal window {DECODE_W} L={DECODE_LENS} splits={n_splits}, NaN in {which} " \
                    "before the window"
            cases += decode_feature_cases(ctx, label, q, kk, vv, lens, feature_kw={"window_size": window},
                                          rewrite=lambda q1, k1, v1: rewrite(q1, *_clean(k1, v1)),
                                          num_splits=n_splits)
    return cases


def _clean(k, v):
    """k, v with their NaN (the planted keys, masked in the reference) zeroed."""
    return k.nan_to_num(0.0), v.nan_to_num(0.0)


PROBE = Probe(
    name="window-poisoned-keys",
    summary="sliding window_size=(left, right): keys outside it score highest, then hold NaN in K, then V (SDPA "
            "and paged decode); any read of one fails",
    refs=("vllm-project/vllm PR #30887", "Dao-AILab/flash-attention window_size"),
    run=run,
)
