"""Deviation metrics between an output and its reference, and the 1-D Wasserstein distance.

All metrics are computed in float64 from the carrier values; NaN/inf in either tensor are data:
they make max-type metrics inf/NaN rather than raising.

Shape alphabet: a tensor's last dimension is a *row* (one query's output vector, d values); the
per-row metrics reduce over it and then over the rows.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnum.errors import AttnumInputError
from attnum.numerics.formats import FloatFormat, get_format

BASIC = ("max_abs", "mean_abs", "std_abs", "rmse", "max_rel", "cosine", "rel_l1")
# Signed and scale-free metrics (e = x - ref, |ref| averaged over all elements or over one row):
SIGNED = ("mean_signed", "mean_magnitude", "bias")
RELATIVE = ("rel_max_abs", "rel_mean_abs", "rel_rmse", "rel_mean_signed", "row_rel_max_abs", "row_rel_mean_abs")


def ulp(x: torch.Tensor | float, fmt: str | FloatFormat) -> torch.Tensor | float:
    """The spacing of ``fmt``'s grid at |x| (one unit in the last place), float64.

    The one ulp definition of attnum (metrics, the auditor's floor, probe construction):
    ``eps * 2**e`` for |x| in the binade [2**e, 2**(e+1)) of a normal number; below the smallest
    normal, the subnormal spacing 2**(emin - mbits) (or ``tiny`` when the format flushes
    subnormals: then 0 and tiny are neighbours); at and beyond ``max``, the top binade's spacing;
    inf and NaN give inf and NaN. A float in gives a float out.
    """
    fmt = get_format(fmt)
    if not isinstance(x, torch.Tensor):
        return float(ulp(torch.tensor([float(x)], dtype=torch.float64), fmt)[0])
    a = x.double().abs()
    # exact binade from frexp (log2 can round up just below a power of two); clamping into
    # [tiny, max] puts 0 and subnormals in the bottom binade, whose spacing the subnormals share
    _, e = torch.frexp(a.clamp(min=fmt.tiny, max=fmt.max))
    q = e.to(torch.float64) - 1 - fmt.mbits
    u = torch.exp2(q)
    if not fmt.subnormals:
        u = torch.where(a < fmt.tiny, torch.full_like(u, fmt.tiny), u)
    return torch.where(torch.isfinite(a), u, a)


def signed_error(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """e = x - ref element-wise in float64 (the shape of ``x``)."""
    _same_shape(x, ref)
    return x.double() - ref.double()


def magnitude_error(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """e * sign(ref) element-wise in float64: positive where x is farther from zero than ref,
    negative where it is nearer (an element whose ref is 0 gives 0)."""
    return signed_error(x, ref) * ref.double().sign()


def deviation(x: torch.Tensor, ref: torch.Tensor, *, fmt: str | FloatFormat | None = None) -> dict[str, float]:
    """Deviation of ``x`` from ``ref`` (any equal shapes; the last dimension is a row).

    Unsigned: max_abs, mean_abs, std_abs, rmse, max_rel, cosine, rel_l1.
    Signed (e = x - ref): ``mean_signed`` = mean(e); ``mean_magnitude`` = mean(e * sign(ref));
    ``bias`` = mean_magnitude / mean_abs, in [-1, 1]: +1 when every error makes |x| larger than
    |ref|, -1 when every error shrinks it, near 0 when errors cancel (0 when there is no error).
    Relative to the output's scale s = mean |ref| (so a metric does not fall just because |O| does):
    ``rel_max_abs``, ``rel_mean_abs``, ``rel_rmse``, ``rel_mean_signed`` (= mean_signed / s); per
    row r: ``row_rel_max_abs`` = max_r max|e_r| / mean|ref_r| and ``row_rel_mean_abs`` = mean_r
    mean|e_r| / mean|ref_r| (a row whose ref is all zero counts inf if it has an error, else 0).
    With ``fmt`` also max_ulp and mean_ulp: the difference in ULPs of ``fmt`` at the scale of ``ref``
    (ulp of max |ref|).
    """
    _same_shape(x, ref)
    a, b = x.double().flatten(), ref.double().flatten()
    if a.numel() == 0:
        return {k: 0.0 for k in (*BASIC, *SIGNED, *RELATIVE)}
    e = a - b
    diff = e.abs()
    denom = b.abs()
    rel = torch.where(denom > 0, diff / denom, torch.where(diff > 0, math.inf, 0.0))
    norms = a.norm() * b.norm()
    out = {
        "max_abs": diff.max().item(),
        "mean_abs": diff.mean().item(),
        "std_abs": diff.std(unbiased=False).item(),
        "rmse": diff.square().mean().sqrt().item(),
        "max_rel": rel.max().item(),
        "cosine": ((a @ b) / norms).item() if norms > 0 else float(torch.equal(a, b)),
        "rel_l1": (diff.sum() / denom.sum()).item() if denom.sum() > 0 else float(diff.sum() > 0) * math.inf,
    }
    out["mean_signed"] = e.mean().item()
    out["mean_magnitude"] = (e * b.sign()).mean().item()
    out["bias"] = _ratio(out["mean_magnitude"], out["mean_abs"])
    scale = denom.mean().item()
    for key, num in (("rel_max_abs", "max_abs"), ("rel_mean_abs", "mean_abs"), ("rel_rmse", "rmse"),
                     ("rel_mean_signed", "mean_signed")):
        out[key] = _ratio(out[num], scale)
    width = x.shape[-1] if x.dim() >= 1 and x.shape[-1] > 0 else 1
    rows_e, rows_ref = diff.reshape(-1, width), denom.reshape(-1, width)
    row_scale = rows_ref.mean(dim=1)
    out["row_rel_max_abs"] = _row_ratio(rows_e.max(dim=1).values, row_scale).max().item()
    out["row_rel_mean_abs"] = _row_ratio(rows_e.mean(dim=1), row_scale).mean().item()
    if fmt is not None:
        # In ULPs of fmt at the output's scale (its largest finite magnitude): element-wise ULPs
        # explode on outputs that cancel to near zero and say nothing about the kernel there.
        finite = b[torch.isfinite(b)].abs()
        top = finite.max() if finite.numel() else torch.tensor(0.0, dtype=torch.float64)
        unit = ulp(top.reshape(1), get_format(fmt))[0]
        out["max_ulp"] = (diff.max() / unit).item()
        out["mean_ulp"] = (diff.mean() / unit).item()
    return out


def _same_shape(x: torch.Tensor, ref: torch.Tensor) -> None:
    if x.shape != ref.shape:
        raise AttnumInputError(f"x.shape={tuple(x.shape)} is not allowed; expected ref's shape {tuple(ref.shape)}")


def _ratio(num: float, den: float) -> float:
    """num / den with 0/0 = 0 and x/0 = +-inf (no error is no relative error; any error on a zero
    scale is unbounded); NaN stays NaN."""
    if den == 0 and not math.isnan(num):
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / den


def _row_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    safe = torch.where(den > 0, den, torch.ones_like(den))
    return torch.where(den > 0, num / safe, torch.where(num > 0, math.inf, torch.where(num == 0, 0.0, num)))


def error_ratio(impl_vs_golden: dict[str, float], baseline_vs_golden: dict[str, float], key: str = "max_abs") -> float:
    """FlashAttention's test ratio: err(impl vs golden) / err(same-precision baseline vs golden)."""
    num, den = impl_vs_golden[key], baseline_vs_golden[key]
    if den == 0:
        return 1.0 if num == 0 else math.inf
    return num / den


def wasserstein_distance(a, b, a_weights=None, b_weights=None) -> float:
    """Exact 1-D Wasserstein-1 distance between two empirical distributions.

    Equal sizes without weights: mean |sort(a) - sort(b)| (the quantile functions are step
    functions with the same steps), sorted in the input dtype and accumulated in float64.
    Otherwise the CDF form: integral of |F_a - F_b| over the merged support, in float64.
    Accepts torch tensors or numpy arrays of any shape (flattened).
    """
    x, y = _np1d(a, "a"), _np1d(b, "b")
    if a_weights is None and b_weights is None and x.size == y.size:
        xs, ys = np.sort(x), np.sort(y)
        return float(np.abs(xs.astype(np.float64) - ys.astype(np.float64)).mean(dtype=np.float64))
    x, y = x.astype(np.float64), y.astype(np.float64)
    wx = _weights(a_weights, x.size, "a_weights")
    wy = _weights(b_weights, y.size, "b_weights")
    ix, iy = np.argsort(x, kind="stable"), np.argsort(y, kind="stable")
    x, wx, y, wy = x[ix], wx[ix], y[iy], wy[iy]
    support = np.concatenate([x, y])
    support.sort(kind="stable")
    deltas = np.diff(support)
    cx = np.concatenate([[0.0], np.cumsum(wx)]) / wx.sum()
    cy = np.concatenate([[0.0], np.cumsum(wy)]) / wy.sum()
    fx = cx[np.searchsorted(x, support[:-1], side="right")]
    fy = cy[np.searchsorted(y, support[:-1], side="right")]
    return float(np.sum(np.abs(fx - fy) * deltas))


def _np1d(t, name: str) -> np.ndarray:
    arr = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    arr = arr.reshape(-1)
    if arr.size == 0:
        raise AttnumInputError(f"{name} has 0 elements; expected a non-empty sample")
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    return arr


def _weights(w, n: int, name: str) -> np.ndarray:
    if w is None:
        return np.ones(n, dtype=np.float64)
    arr = _np1d(w, name).astype(np.float64)
    if arr.size != n or (arr < 0).any() or arr.sum() <= 0:
        raise AttnumInputError(f"{name} is not allowed; expected {n} non-negative weights with a positive sum")
    return arr
