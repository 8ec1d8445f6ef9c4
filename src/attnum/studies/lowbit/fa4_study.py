"""FlashAttention-4's arithmetic measured: the polynomial exp2's ulp error over whole fp32 binades, and
conditional (lazy) rescaling against FA2's rescale-every-tile on the FlashAttention microbenchmark.

Microbenchmark inputs (FlashAttention-2/3/4 papers' forward benchmark: N(0, 1) Q, K, V, head dim 128,
sequence lengths 512..16k): here B = 1, H = ``heads``, N = S in ``seq_lens`` (CPU-sized), plus a
*late jump*: in the last quarter of the keys one key per head is aligned with the queries' common
direction so that every row's maximum jumps by about ``jump`` log2 units late in the sequence
(the case where lazy rescaling either skips a rescale (jump <= threshold) or performs a large one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnum.attention import flash_attention, golden_attention
from attnum.attention.lowbit.exp2 import binade, exp2_poly, ulp_error
from attnum.errors import bad_value
from attnum.numerics.rounding import round_to

THRESHOLDS = (1.0, 2.0, 4.0, 8.0, 16.0)


def exp2_binade_report(binades=((0, False), (-1, True), (2, True)), degree: int = 3) -> list[dict]:
    """For each (exponent, negative) binade: every one of its 2**23 fp32 inputs through FA4's exp2;
    max and mean ulp error against exact exp2, the fraction above 0.5 ulp (not correctly rounded),
    and the fraction whose bf16 rounding differs from bf16(exact) (what a bf16 P sees)."""
    out = []
    for e, neg in binades:
        x = binade(e, neg)
        y = exp2_poly(x, degree)
        u = ulp_error(y, x)
        exact = torch.exp2(x.double())
        differs = round_to(y.double(), "bf16") != round_to(exact, "bf16")
        lo, hi = (-(2.0 ** (e + 1)), -(2.0**e)) if neg else (2.0**e, 2.0 ** (e + 1))
        out.append({"binade": f"[{lo:g}, {hi:g})", "inputs": int(x.numel()), "degree": degree,
                    "max_ulp": float(u.max()), "mean_ulp": float(u.mean()),
                    "max_rel": float(((y.double() - exact).abs() / exact).max()),
                    "frac_over_half_ulp": float((u > 0.5).double().mean()),
                    "frac_bf16_differs": float(differs.double().mean())})
    return out


@dataclass(frozen=True, kw_only=True)
class RescaleConfig:
    seq_lens: tuple[int, ...] = (512, 2048)
    heads: int = 2
    head_dim: int = 128
    jumps: tuple[float, ...] = (0.0, 4.0, 12.0)
    thresholds: tuple[float, ...] = THRESHOLDS
    fmt: str = "bf16"
    seed: int = 0

    def __post_init__(self) -> None:
        for t in self.thresholds:
            if not (isinstance(t, (int, float)) and 0 < t < math.inf):
                raise bad_value("threshold", t, "a positive finite number of log2 units")
        for n in self.seq_lens:
            if not (isinstance(n, int) and n >= 128):
                raise bad_value("seq_len", n, "an integer >= 128 (one 128-key tile and more)")
        for j in self.jumps:
            if not (isinstance(j, (int, float)) and 0 <= j < 100):
                raise bad_value("jump", j, "a number of log2 units in [0, 100)")


def late_jump_qkv(seq_len: int, heads: int, head_dim: int, jump: float, seed: int):
    """N(0, 1) Q, K, V (B = 1); for jump > 0, the queries share a direction u and key S - S/8 is
    u scaled so that q . k / sqrt(d) exceeds the typical row maximum by ``jump`` log2 units."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, seq_len, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(1, heads, seq_len, head_dim, generator=g, dtype=torch.float64)
    v = torch.randn(1, heads, seq_len, head_dim, generator=g, dtype=torch.float64)
    if jump > 0:
        u = torch.randn(1, heads, 1, head_dim, generator=g, dtype=torch.float64)
        u = u / u.norm(dim=-1, keepdim=True)
        q = q + 2.0 * u  # a common component of norm 2
        typical = float((q @ k.transpose(-1, -2)).amax(-1).mean()) / math.sqrt(head_dim)
        target = typical + jump * math.log(2)
        k[:, :, seq_len - seq_len // 8] = u[:, :, 0] * target * math.sqrt(head_dim) / 2.0
    return q, k, v


def run_rescale_study(cfg: RescaleConfig) -> list[dict]:
    """Rows (seq_len, jump, policy, threshold): RMSE and max error against the float64 golden value,
    and the RMSE on the rows whose maximum grew late by at most the threshold (rescale skipped)."""
    from attnum.sweep.memory_budget import require_lowbit

    require_lowbit(batch=1, heads=cfg.heads, seq_len=max(cfg.seq_lens), head_dim=cfg.head_dim,
                   what="lowbit-table --rescale", lower="--seq-lens")
    rows = []
    for n in cfg.seq_lens:
        for jump in cfg.jumps:
            q, k, v = late_jump_qkv(n, cfg.heads, cfg.head_dim, jump, cfg.seed)
            gold = golden_attention(q, k, v)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(cfg.head_dim)
            early = s[..., : 3 * n // 4].amax(-1)
            late_growth = (s.amax(-1) - early).clamp(min=0) / math.log(2)  # log2 units, per row
            specs = [("fa2", None, f"fa2:{cfg.fmt}")] + [
                ("fa2+lazy", t, f"fa2:{cfg.fmt},rescale_threshold={t:g}") for t in cfg.thresholds] + [
                ("fa4", 8.0, f"fa4:{cfg.fmt}")]
            for name, t, spec in specs:
                o = flash_attention(q, k, v, policy=spec).double()
                err = (o - gold).pow(2).mean(-1)  # per row
                skipped = (late_growth > 0) & (late_growth <= (t or 8.0))  # fa2: the rows FA4 would skip
                rows.append({"seq_len": n, "jump": jump, "policy": name, "spec": spec, "threshold": t,
                             "rmse": float(err.mean().sqrt()), "max_abs": float((o - gold).abs().max()),
                             "rows_rescale_skipped": int(skipped.sum()),
                             "rmse_skipped_rows": float(err[skipped].mean().sqrt()) if bool(skipped.any()) else None,
                             "late_growth_log2": float(late_growth.mean())})
    return rows
