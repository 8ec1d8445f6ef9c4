"""Weight divergence between two models: the paper's two metrics, per tensor and overall.

- max_abs: max |a - b| (the paper's upper bound), computed in float64 so the subtraction is exact
  for float32 weights;
- w1: the 1-D Wasserstein-1 distance between the empirical distributions of the flattened
  weights (``attnum.numerics.metrics.wasserstein_distance``: sort, then mean |sort(a) - sort(b)| in float64).

"Global" figures: ``max_abs`` is the max over tensors; ``w1`` is W1 between the concatenations of
all compared tensors (one distribution of every weight), which is *not* the mean of per-tensor W1s;
``w1_mean`` (numel-weighted mean of per-tensor W1) is reported beside it.

Tensors present in only one state, or with different shapes, are listed as mismatches and left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnum.numerics.metrics import wasserstein_distance
from attnum.numerics.nanmath import nan_max


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    name: str
    reason: str  # "only in A", "only in B", "shape A (..) vs B (..)", "not floating"


@dataclass(frozen=True, kw_only=True)
class Divergence:
    per_tensor: dict[str, dict[str, float]]
    max_abs: float
    w1: float
    w1_mean: float
    numel: int
    mismatches: list[Mismatch] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "max_abs": self.max_abs,
            "w1": self.w1,
            "w1_mean": self.w1_mean,
            "numel": self.numel,
            "per_tensor": self.per_tensor,
            "mismatches": [{"name": m.name, "reason": m.reason} for m in self.mismatches],
        }


def _strip_ddp(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


def weight_divergence(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> Divergence:
    """Compare every floating tensor present in both states with equal shapes."""
    a, b = _strip_ddp(a), _strip_ddp(b)
    mismatches = [Mismatch(name=n, reason="only in A") for n in sorted(set(a) - set(b))]
    mismatches += [Mismatch(name=n, reason="only in B") for n in sorted(set(b) - set(a))]
    per: dict[str, dict[str, float]] = {}
    flat_a, flat_b = [], []
    for name in sorted(set(a) & set(b)):
        ta, tb = a[name], b[name]
        if tuple(ta.shape) != tuple(tb.shape):
            mismatches.append(Mismatch(name=name, reason=f"shape A {tuple(ta.shape)} vs B {tuple(tb.shape)}"))
            continue
        if not (ta.is_floating_point() and tb.is_floating_point()):
            mismatches.append(Mismatch(name=name, reason="not floating"))
            continue
        if ta.numel() == 0:
            continue
        # float32 holds bf16/fp16/fp32 weights exactly; float64 weights stay float64.
        wide = torch.float64 if torch.float64 in (ta.dtype, tb.dtype) else torch.float32
        xa, xb = ta.detach().reshape(-1).to(wide), tb.detach().reshape(-1).to(wide)
        per[name] = {
            "max_abs": float((ta.double() - tb.double()).abs().max()),
            "w1": wasserstein_distance(xa, xb),
            "numel": float(ta.numel()),
        }
        flat_a.append(xa)
        flat_b.append(xb)
    numel = int(sum(t.numel() for t in flat_a))
    if not per:
        return Divergence(per_tensor={}, max_abs=float("nan"), w1=float("nan"), w1_mean=float("nan"),
                          numel=0, mismatches=mismatches)
    return Divergence(
        per_tensor=per,
        max_abs=nan_max(v["max_abs"] for v in per.values()),  # a NaN tensor is never hidden by the others
        w1=wasserstein_distance(_cat(flat_a), _cat(flat_b)),
        w1_mean=sum(v["w1"] * v["numel"] for v in per.values()) / numel,
        numel=numel,
        mismatches=mismatches,
    )


def _cat(flats: list[torch.Tensor]) -> torch.Tensor:
    wide = torch.float64 if any(t.dtype == torch.float64 for t in flats) else torch.float32
    return torch.cat([t.to(wide) for t in flats])
