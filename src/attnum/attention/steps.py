"""The arithmetic steps baseline and flash share, each ending at a named rounding site.

Shape alphabet: B batch, H heads, N queries, S keys (or a block of Bc keys), d head dim, dv value dim.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading

import torch

from attnum.attention.masks import Tile, apply_keep_
from attnum.numerics.formats import FloatFormat, format_of_dtype
from attnum.numerics.policy import Policy
from attnum.numerics.rounding import round_to, round_to_
from attnum.numerics.workspace import Workspace

_CARRIERS = (torch.float32, torch.float64)


def load_input(x: torch.Tensor, policy: Policy, rnd=round_to) -> torch.Tensor:
    """The one input preamble: ``x`` rounded to the ``inputs`` format exactly once, from its own
    values, then held in the policy's carrier (an exact conversion: the format fits the carrier).

    Never ``round(x.to(carrier))``: a float64 x cast to a float32 carrier first would round twice
    (1 + 2**-8 + 2**-30 -> 1.0 in bf16 instead of 1.0078125). A narrow dtype (bf16, fp16, fp8) is
    widened exactly to float64 first; when its every value is an ``inputs`` value no rounding is done.
    """
    c = policy.carrier
    if x.dtype not in _CARRIERS:
        if format_of_dtype(x.dtype, param="input dtype").fits_in(policy.inputs):
            return x.to(c)
        x = x.to(torch.float64)
    return rnd(x, policy.inputs).to(c)


def no_autocast(fn):
    """Run an attention implementation with autocast off: its precision is the policy's alone
    (under autocast a float32-carrier matmul would silently become a bf16 one)."""

    @functools.wraps(fn)
    def wrapper(q, *args, **kwargs):
        device = q.device.type if isinstance(q, torch.Tensor) else "cpu"
        if device not in ("cpu", "cuda", "xpu", "mps", "hpu"):  # meta, ...: no autocast to turn off;
            device = "cpu"  # the implementation's own checks answer (e.g. q/k/v on different devices)
        with torch.autocast(device_type=device, enabled=False):
            return fn(q, *args, **kwargs)

    return wrapper


_OUTER = threading.local()  # the caller's intra-op thread count while a tile step runs single-threaded


def caller_threads() -> int:
    """The caller's intra-op thread count: the one saved by :func:`elementwise_single_thread` while it
    runs, else torch's."""
    return getattr(_OUTER, "n", None) or torch.get_num_threads()


@contextlib.contextmanager
def elementwise_single_thread():
    """Run a tile step's element-wise ops on one intra-op thread; :func:`matmul` alone uses the
    caller's threads. A 32k-element exp split across threads waits on the hand-off (2.5-8 ms per op
    measured on a busy 2-core machine), and torch's vectorized loops treat each thread's last
    elements separately, so one thread also keeps the bits independent of the thread count."""
    n = torch.get_num_threads()
    if n == 1 or getattr(_OUTER, "n", None):
        yield
        return
    _OUTER.n = n
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
        _OUTER.n = None


def matmul(a: torch.Tensor, b: torch.Tensor, policy: Policy, out: torch.Tensor | None = None,
           rnd=round_to, *, sites: tuple[str, str] = ("inputs", "inputs"), c: torch.Tensor | None = None
           ) -> torch.Tensor:
    """a @ b under the policy's matmul model (:func:`_matmul`). ``sites``: the rounding sites whose
    formats a and b lie on (``("probs", "inputs")`` for P V), which an ``mma`` policy casts them to.
    ``c``: an fp32 accumulator the product is added to inside the MMA (``mma`` policies only)."""
    outer = getattr(_OUTER, "n", None)
    if outer and a.device.type == "cpu":
        torch.set_num_threads(outer)
        try:
            return _matmul(a, b, policy, out, rnd, sites, c)
        finally:
            torch.set_num_threads(1)
    return _matmul(a, b, policy, out, rnd, sites, c)


def _matmul(a: torch.Tensor, b: torch.Tensor, policy: Policy, out: torch.Tensor | None = None,
            rnd=round_to, sites: tuple[str, str] = ("inputs", "inputs"), c: torch.Tensor | None = None
            ) -> torch.Tensor:
    """a @ b under the policy's accumulation model (unrounded at the output site).

    exact/native: one BLAS call in the carrier. emulated: the reduction dimension is summed
    ``reduction_chunk`` products at a time exactly (float64), each partial sum added into an
    accumulator rounded to ``matmul_acc``. ``out``: a buffer to write a native product into.
    ``rnd``: how the accumulator rounds (``round_ste`` when the caller is differentiated).
    mma: :func:`attnum.numerics.mma.sites.matmul` of ``policy.mma`` (not differentiable).
    """
    mode = policy.matmul_mode
    if mode == "mma":
        from attnum.numerics.mma import sites as mma_sites

        return mma_sites.matmul(a, b, arch=policy.mma, a_fmt=getattr(policy, sites[0]), b_fmt=getattr(policy, sites[1]),
                                c=c, a_site=sites[0], b_site=sites[1])
    if c is not None:
        raise ValueError("an accumulator c is only fed to the product under an mma policy")
    if mode != "emulated":
        return torch.matmul(a, b, out=out) if out is not None else a @ b
    chunk = policy.reduction_chunk or 1
    k = a.shape[-1]
    acc = None
    for c0 in range(0, k, chunk):
        part = a[..., c0:c0 + chunk] @ b[..., c0:c0 + chunk, :]
        acc = part if acc is None else acc + part
        acc = rnd(acc, policy.matmul_acc)
    return acc


def scores(
    q_BHNd: torch.Tensor,
    k_BHSd: torch.Tensor,
    scale: float,
    tile: Tile,
    policy: Policy,
    out: torch.Tensor | None = None,
    ws: Workspace | None = None,
    rnd=None,
) -> torch.Tensor:
    """S = scale * Q K^T rounded at ``scores``; an additive mask is added and rounded there again
    (as torch adds a float mask in the scores' dtype); -inf masking (``tile.keep``) is exact.

    Rounding: in place from ``ws`` (hot loops), or out of place with ``rnd`` (``round_to``, or
    ``round_ste`` when differentiated: then no tensor autograd needs is modified in place).
    """
    grad = rnd is not None and rnd is not round_to
    s_BHNS = matmul(q_BHNd, k_BHSd.transpose(-1, -2), policy, out=out, rnd=rnd or round_to)
    if scale != 1.0:
        s_BHNS = s_BHNS * scale if grad else s_BHNS.mul_(scale)
    if ws is not None:
        def r(t):
            return round_site_(policy, "scores", t, ws)
    else:
        def r(t):
            return (rnd or round_to)(t, policy.scores)
    s_BHNS = r(s_BHNS)
    if tile.additive is not None:
        s_BHNS = r(s_BHNS + tile.additive if grad else s_BHNS.add_(tile.additive))
    if tile.keep is not None:
        s_BHNS = s_BHNS.masked_fill(~tile.keep, float("-inf")) if grad else apply_keep_(s_BHNS, tile.keep)
    return s_BHNS


def prescale(q: torch.Tensor, scale: float, policy: Policy) -> tuple[torch.Tensor, float]:
    """(q', s') with q' K^T s' == scale * (Q K^T) bit for bit, and s' = 1 when possible.

    A power-of-two scale commutes with every rounding as long as nothing leaves the carrier's
    normal range, so it can be applied to Q once instead of to every score tile (an N x S pass
    saved per tile). Otherwise the scale stays where the kernels apply it: after the matmul.
    The one difference: a dot product whose partial sums fall below the carrier's smallest
    normal (|x| < 2**-126 in float32) rounds on the subnormal grid of the scaled value. An
    emulated accumulator format has a far narrower range, so there the scale is never moved; nor
    under an ``mma`` policy (its exponent floor and fp8 operand grids do not commute with a scale).
    """
    mant, _ = math.frexp(scale)
    if mant != 0.5 or q.numel() == 0 or policy.matmul_mode in ("emulated", "mma"):
        return q, scale
    finfo = torch.finfo(q.dtype)
    hi, lo = _abs_range(q)
    if not (math.isfinite(hi) and lo * scale >= finfo.tiny and hi * scale <= finfo.max):
        return q, scale
    return q * scale, 1.0


def _abs_range(q: torch.Tensor) -> tuple[float, float]:
    """(max |q| (NaN when q holds one), smallest nonzero |q| (inf when none)): one compiled pass on the
    CPU (:func:`attnum.attention.fused_kernels.abs_range`), torch's reductions elsewhere."""
    from attnum.numerics import jit

    if jit.enabled() and q.device.type == "cpu" and q.dtype in _CARRIERS:
        import numpy as np

        from attnum.attention.fused_kernels import abs_range_bits

        flat = q.detach().contiguous().view(-1).numpy()
        return abs_range_bits(flat.view(np.int32 if flat.dtype == np.float32 else np.int64))
    a = q.abs()
    return a.max().item(), a.masked_fill_(a == 0, math.inf).min().item()


def zero_empty_rows_(x: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """Rows whose softmax denominator is exactly 0 (every key masked) become 0 instead of 0/0.
    NaN denominators (NaN in the data) stay NaN: they are data, not empty rows."""
    empty = l == 0
    return x.masked_fill_(empty, 0.0) if bool(empty.any()) else x


def exp_shifted_(s: torch.Tensor, m_safe: torch.Tensor) -> torch.Tensor:
    """exp(s - m) computed in place in s (s is a scratch tensor owned by the caller)."""
    return s.sub_(m_safe).exp_()


def safe_max(m: torch.Tensor) -> torch.Tensor:
    """The row maximum to subtract: 0 where the row has no unmasked key yet (m = -inf), so that
    exp(-inf - m) is 0 rather than NaN, as FlashAttention does."""
    return torch.where(m == float("-inf"), torch.zeros_like(m), m)


# Qiu & Yao's fix (arXiv 2510.04212; ucker/why-low-precision-training-fails, attention.py l.83-89):
# a tile row with more than one score within QIU_YAO_TOL of its maximum m is shifted by
# QIU_YAO_BETA * m (m > 0) or 0 (m < 0) instead of m.
QIU_YAO_TOL = 1e-3  # absolute, in logit units (the scores S = scale * Q K^T on the ``scores`` grid)
QIU_YAO_BETA = 2.0


def shift_limit(policy: Policy) -> float:
    """The largest |m| the Qiu-Yao shift is applied at: -ln(tiny) of the narrowest of the formats
    holding P~ and l (``exp``, ``probs``, ``row_sum``). The shifted maximum entry is exp(-|m|); beyond
    this it would leave the normal range (bf16/fp32: |m| > 87.34; fp16: 9.70; e4m3fn: 4.16) and, a
    little further, round to 0 with the whole row, which would then read as an empty row."""
    return min(-math.log(getattr(policy, site).tiny) for site in ("exp", "probs", "row_sum"))


def block_max(s: torch.Tensor, policy: Policy) -> torch.Tensor:
    """The shift of one tile's rows (B, H, N, 1): the row maximum m~ of ``s`` (B, H, N, Bc), or under
    ``policy.max_shift == "qiu-yao"`` Qiu & Yao's shifted maximum (:func:`qiu_yao_shift`)."""
    m = s.amax(dim=-1, keepdim=True)
    if policy.max_shift == "none":
        return m
    return qiu_yao_shift(s, m, limit=shift_limit(policy))


def qiu_yao_shift(s: torch.Tensor, m: torch.Tensor, *, tol: float = QIU_YAO_TOL,
                  limit: float = math.inf) -> torch.Tensor:
    """m' = 2m (m > 0) or 0 (m < 0) on rows where more than one score s_j has m - s_j <= ``tol``
    (the max itself included; m - s_j in the carrier, exact by Sterbenz whenever it is <= tol for
    |m| >= 2 tol), and |m| <= ``limit``; m elsewhere, and where m = 0 (2 * 0 = 0: ties at 0 keep
    their exact 1s). m' >= m always, so every exp(s - m') <= exp(-|m|) < 1 on a shifted row.
    Rows with no unmasked key (m = -inf) count no score (-inf - -inf is NaN) and keep m."""
    near = ((m - s) <= tol).sum(dim=-1, keepdim=True)
    shift = (near > 1) & (m.abs() <= limit)
    return torch.where(shift, torch.where(m > 0, QIU_YAO_BETA * m, torch.zeros_like(m)), m)


def pv(
    p_BHNS: torch.Tensor, v_BHSd: torch.Tensor, policy: Policy, ws: Workspace | None = None,
    p_grid: FloatFormat | None = None, rnd=round_to,
) -> torch.Tensor:
    """P V with P rounded at ``probs`` and the product rounded at ``acc``.

    ``p_grid``: a format P already lies on; when every value of it is a ``probs`` value the
    ``probs`` rounding is the identity and is skipped (flash's P comes straight from ``exp``).
    """
    if p_grid is None or not p_grid.fits_in(policy.probs):
        p_BHNS = round_site_(policy, "probs", p_BHNS, ws) if ws is not None else rnd(p_BHNS, policy.probs)
    return rnd(matmul(p_BHNS, v_BHSd, policy, rnd=rnd, sites=("probs", "inputs")), policy.acc)


def mma_accumulates(policy: Policy) -> bool:
    """True when flash's P V product accumulates onto O inside the MMA: an ``mma`` policy whose ``acc``
    is fp32, the instruction's accumulator (FlashAttention-2/3 rescale O, then pass it to the P V
    MMA as its C operand), unless ``mma_chain=off``. Otherwise the tile's product is formed from a zero
    accumulator and added."""
    return policy.mma is not None and policy.acc.name == "fp32" and policy.mma_chain


def acc_once(acc_BHNd: torch.Tensor, alpha_BHN1: torch.Tensor, p_BHNS: torch.Tensor, v_BHSd: torch.Tensor,
             policy: Policy, p_grid: FloatFormat | None = None) -> torch.Tensor:
    """``acc_update=once``: O alpha + P V formed in fp32 (the matmul's fp32 output, each operation rounded
    to fp32, as a kernel's registers hold them) and rounded at ``acc`` once; returns the new acc."""
    if p_grid is None or not p_grid.fits_in(policy.probs):
        p_BHNS = round_to(p_BHNS, policy.probs)
    pv = round_to(matmul(p_BHNS, v_BHSd, policy, sites=("probs", "inputs")), "fp32")
    t = round_to(round_to(acc_BHNd * alpha_BHN1, "fp32") + pv, "fp32")
    return policy.round("acc", t).to(acc_BHNd.dtype)


def pv_onto(acc_BHNd: torch.Tensor, alpha_BHN1: torch.Tensor, p_BHNS: torch.Tensor, v_BHSd: torch.Tensor,
            policy: Policy, ws: Workspace | None = None, p_grid: FloatFormat | None = None) -> torch.Tensor:
    """round(acc * alpha) then P V added onto it by the MMA (:func:`mma_accumulates`); returns the new
    acc (fp32 values). P is rounded at ``probs`` first unless ``p_grid`` fits it."""
    if p_grid is None or not p_grid.fits_in(policy.probs):
        p_BHNS = round_site_(policy, "probs", p_BHNS, ws) if ws is not None else round_to(p_BHNS, policy.probs)
    acc_BHNd = policy.round("acc", acc_BHNd.mul_(alpha_BHN1))
    return policy.round("acc", matmul(p_BHNS, v_BHSd, policy, sites=("probs", "inputs"), c=acc_BHNd))


def round_site_(policy: Policy, site: str, x: torch.Tensor, ws: Workspace) -> torch.Tensor:
    """policy.round(site, x), in place in x (a scratch tensor of the caller's) where possible."""
    return round_to_(x, getattr(policy, site), ws)


def query_chunk(B: int, H: int, S: int, budget_elems: int = 1 << 23) -> int:
    """Rows per query chunk so one (B, H, chunk, S) score tensor stays near ``budget_elems``
    (64 MB in float64: measured fastest here, big enough for efficient GEMMs, small enough to reuse)."""
    return max(1, budget_elems // max(1, B * H * S))
