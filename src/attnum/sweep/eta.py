"""A sweep's ETA from a cost model of the points left, calibrated on the points done.

The mean time of the points done is a poor guess when the points left are not like them (the quick
reproduction runs its N = 8192 grid last: 12 % of the points, 65 % of the point-seconds). Here each
point is described by what its work scales with (:func:`features`):

- ``golden``: B*H*N*S*d, the float64 golden value's multiply-adds (every point computes one);
- ``emulated``: B*H*N*S per emulated run, where a run rounds with torch's casts (bf16, fp16, fp32);
- ``generic``: the same for formats rounded bit by bit (e8m3, e4m3fn, ...: several times slower);
- ``tiles``: flash's key/value tiles, Tc = ceil(S / Bc) per run: the per-tile Python overhead;
- ``kernels``: B*H*N*S per real kernel run at a ``kernels`` point;
- ``point``: 1, the fixed cost of a point (inputs, metrics, the store).

Seconds per unit of
each feature are fitted online by non-negative least squares on the points done (their own wall
times); the remaining wall time is ``elapsed * predicted(left) / predicted(done)``, so parallel
workers and the driver's own overhead are taken from the run itself. A point with a feature no done
point had yet is predicted with a fixed prior cost scaled by the run so far. Nothing here imports torch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

FEATURES = ("golden", "emulated", "generic", "tiles", "kernels", "point")
NATIVE = ("bf16", "fp16", "fp32", "fp64", "tf32")
# Prior weights (seconds-ish per unit, relative only), used where the fit has not seen a feature.
PRIOR = (1.0 / 64, 1.0, 4.0, 2e4, 0.5, 2e5)
MIN_POINTS = 8


def features(point: Any) -> tuple[float, ...]:
    """The point's cost features (see the module docstring). A point type may say its own with a
    ``cost_features()`` method (a study whose point runs more than flash and baseline, or real
    kernels: it calls :func:`attention_features`); else duck-typed, and a point without attention
    shape fields costs ``point`` only."""
    own = getattr(point, "cost_features", None)
    if callable(own):
        return tuple(float(x) for x in own())
    return attention_features(point)


def attention_features(point: Any, *, runs: int = 2, kernel_runs: float = 0.0) -> tuple[float, ...]:
    """Features of ``runs`` emulated attentions (flash and baseline: 2) and ``kernel_runs`` real kernel
    runs per element of the score matrix, plus the float64 golden value, at the point's shape."""
    try:
        B, H, N, d = (int(getattr(point, f)) for f in ("batch", "heads", "seq_len", "head_dim"))
    except (AttributeError, TypeError, ValueError):
        return (0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    kv_len = getattr(point, "kv_len", None)
    S = int(kv_len) if kv_len is not None else N
    area = float(B * H * N * S)
    if runs == 0:
        return (area * d, 0.0, 0.0, 0.0, kernel_runs * area, 1.0)
    try:
        Tc = math.ceil(S / point.tiles().Bc)
    except Exception:  # noqa: BLE001 - a point without tiles: no tile term
        Tc = 0
    fmt = str(getattr(point, "format", "bf16") or "bf16").split("-")[0]
    native = fmt in NATIVE
    return (area * d, runs * area if native else 0.0, 0.0 if native else runs * area, float(runs * Tc) / 2,
            kernel_runs * area, 1.0)


def _solve(gram: Sequence[Sequence[float]], rhs: Sequence[float], cols: Sequence[int]) -> list[float] | None:
    """Least squares on the columns ``cols`` from the normal equations (columns scaled to unit norm)."""
    k = len(cols)
    norms = [math.sqrt(gram[c][c]) or 1.0 for c in cols]
    a = [[gram[ci][cj] / (ni * nj) for cj, nj in zip(cols, norms)] for ci, ni in zip(cols, norms)]
    b = [rhs[ci] / ni for ci, ni in zip(cols, norms)]
    for i in range(k):  # a tiny ridge keeps a near-collinear pair solvable
        a[i][i] += 1e-9
    for i in range(k):  # Gaussian elimination with partial pivoting
        p = max(range(i, k), key=lambda j: abs(a[j][i]))
        if abs(a[p][i]) < 1e-12:
            return None
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        for j in range(i + 1, k):
            f = a[j][i] / a[i][i]
            a[j] = [x - f * y for x, y in zip(a[j], a[i])]
            b[j] -= f * b[i]
    x = [0.0] * k
    for i in reversed(range(k)):
        x[i] = (b[i] - sum(a[i][j] * x[j] for j in range(i + 1, k))) / a[i][i]
    return [xi / ni for xi, ni in zip(x, norms)]


def nnls(gram: Sequence[Sequence[float]], rhs: Sequence[float], yy: float) -> list[float]:
    """Non-negative least squares from X'X, X'y and y'y, trying every subset of the used columns (six)."""
    n = len(rhs)
    used = [c for c in range(n) if gram[c][c] > 0]
    best, best_err = [0.0] * n, yy
    for size in range(1, len(used) + 1):
        for cols in itertools.combinations(used, size):
            x = _solve(gram, rhs, cols)
            if x is None or any(v < 0 for v in x):
                continue
            # |Xc - y|^2 = c'X'Xc - 2c'X'y + y'y
            err = yy - 2 * sum(v * rhs[c] for c, v in zip(cols, x)) + sum(
                vi * vj * gram[ci][cj] for ci, vi in zip(cols, x) for cj, vj in zip(cols, x))
            if err < best_err:
                best, best_err = [0.0] * n, err
                for c, v in zip(cols, x):
                    best[c] = v
    return best


def _pattern(f: Sequence[float]) -> tuple[bool, ...]:
    return tuple(bool(x) for x in f)


class CostModel:
    """Seconds per unit of each feature, fitted on the points done; see the module docstring.

    Everything is kept as sums (X'X, X'y, the features done and left per pattern of non-zero
    features), so observing a point and asking for the ETA cost O(1) in the number of points.
    """

    def __init__(self, todo: Sequence[Any]) -> None:
        n = len(FEATURES)
        self.left: dict[tuple[bool, ...], list[float]] = {}
        self.n_left = 0
        for p in todo:
            self._add(self.left, features(p), 1)
            self.n_left += 1
        self.done_sum = [0.0] * n
        self.n_done = 0
        self.seen = [False] * n
        self.gram = [[0.0] * n for _ in range(n)]
        self.rhs = [0.0] * n
        self.yy = 0.0
        self.seconds = 0.0
        self.prior_done = 0.0
        self._coef: list[float] | None = None
        self._fitted_at = 0

    @staticmethod
    def _add(sums: dict, f: Sequence[float], sign: int) -> None:
        acc = sums.setdefault(_pattern(f), [0.0] * len(f))
        for i, x in enumerate(f):
            acc[i] += sign * x

    def observe(self, point: Any, seconds: float | None) -> None:
        f = features(point)
        if _pattern(f) in self.left:
            self._add(self.left, f, -1)
            self.n_left -= 1
        self.n_done += 1
        for i, x in enumerate(f):
            self.done_sum[i] += x
            if x and not self.seen[i]:  # a kind of work not seen before: its coefficient needs a fit now
                self.seen[i] = True
                self._coef = None
        if seconds is None or not math.isfinite(seconds):
            return
        for i, xi in enumerate(f):
            self.rhs[i] += xi * seconds
            for j, xj in enumerate(f):
                self.gram[i][j] += xi * xj
        self.yy += seconds * seconds
        self.seconds += seconds
        self.prior_done += sum(w * x for w, x in zip(PRIOR, f))

    def coefficients(self) -> list[float]:
        if self._coef is None or self.n_done >= min(self._fitted_at * 1.1, self._fitted_at + 50) + 4:
            # refit as the sample grows (by 10 %, or by 50 points late in a long sweep)
            self._coef = nnls(self.gram, self.rhs, self.yy)
            self._fitted_at = self.n_done
        return self._coef

    def predict_left(self) -> float:
        """Predicted point-seconds of the points left; features no done point had are costed by the prior."""
        coef = self.coefficients()
        prior_scale = self.seconds / self.prior_done if self.prior_done else 0.0
        total = 0.0
        for pattern, f in self.left.items():
            if all(self.seen[c] or not on for c, on in enumerate(pattern)):
                total += sum(c * x for c, x in zip(coef, f))
            else:
                total += prior_scale * sum(w * x for w, x in zip(PRIOR, f))
        return max(total, 0.0)

    def eta(self, elapsed: float) -> float | None:
        """Seconds left, or None before MIN_POINTS points are done."""
        if self.n_left <= 0:
            return 0.0
        if self.n_done < MIN_POINTS:
            return None
        done = sum(c * x for c, x in zip(self.coefficients(), self.done_sum))
        if done <= 0:
            return elapsed / self.n_done * self.n_left
        return elapsed * self.predict_left() / done
