"""Precision policy: the format at every named rounding site of attention.

Sites (the names used by ``Policy.round(site, x)`` in golden/baseline/flash):

========== ================================================================================
inputs     Q, K, V as loaded
scores     S = scale * Q K^T (and S + additive mask)
exp        P = exp(S - m), as fed to the row sum l
probs      P (flash) or P / l (baseline) as fed to the P V matmul
row_sum    l, the softmax denominator (each block's partial sum and the running sum)
rescale    alpha = exp(m_old - m_new), the online-softmax correction factor
acc        O accumulator (the running numerator, and each block's P V product)
out        the final output
lse        the log-sum-exp m + log l a kernel stores for its backward (defaults to row_sum's format:
           real kernels form it in fp32 from their fp32 statistics)
========== ================================================================================

``max_shift`` is flash's choice of the softmax shift (forward and backward; golden and baseline
ignore it): ``none`` subtracts the running row maximum, as FlashAttention does; ``qiu-yao`` is the
fix of Qiu & Yao (arXiv 2510.04212): in a tile whose row holds more than one score within 1e-3 of
its maximum m, the shift becomes 2m (m > 0) or 0 (m < 0), so that no exp(s - shift) is exactly 1
(:func:`attnum.attention.steps.block_max`; the precise rule and its limits are in docs/bias.md).

``matmul_acc`` is the accumulator format inside the two matmuls (QK^T over d, PV over keys):
``None`` accumulates in float64 and rounds once at the site; ``fp32`` (or ``fp64``) is the
native BLAS accumulation in that format, in the BLAS's order; any other format is emulated by
summing ``reduction_chunk`` products exactly before each rounding into the accumulator
(``reduction_chunk=None`` then means 1: round after every addition).

FlashAttention-4's arithmetic (flash only; Dao-AILab/flash-attention ``flash_attn/cute``):
``exp2`` is ``native`` (the carrier's exp) or ``polyN`` (N = 1..5: P = 2**x by FA4's software exp2,
Cody-Waite reduction and a degree-N polynomial on fp32 FMAs, :mod:`attnum.attention.lowbit.exp2`; FA4 uses
N = 3 on part of the elements); ``rescale_threshold`` (None: off) keeps a row's running maximum
until a tile's maximum exceeds it by more than that many log2 units, so the accumulator is
rescaled only then (FA4's conditional rescaling; 8.0 for 16-bit inputs in ``flash_fwd_sm100.py``).

``mma`` (None, or an architecture name: ``sm80``, ``sm90``, ``hopper``, ...; :mod:`attnum.numerics.mma.sites`)
runs the matmul sites as that architecture's tensor-core instructions (:func:`attnum.numerics.mma.dense.matmul`:
per-instruction alignment, truncation and rounding, fp32 output) instead of the ``matmul_acc`` /
``reduction_chunk`` model; flash's P V then accumulates onto the fp32 accumulator O inside the MMA, as
FlashAttention's kernels feed O to the instruction as its C operand.

``lowbit`` (None, or a :class:`attnum.numerics.lowbit.LowBit`) makes flash and baseline run SageAttention's
quantized scheme (:mod:`attnum.attention.lowbit.sage`) with this policy's input and output formats.

The *carrier* (the dtype tensors are held in) follows from the policy: float32 when every site
fits in fp32 and the matmuls accumulate in fp32 natively -- then element-wise math (exp,
division) runs in float32 as real kernels do -- else float64.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from attnum.errors import AttnumInputError, did_you_mean
from attnum.numerics.formats import PRESETS, FloatFormat, get_format
from attnum.numerics.rounding import round_to

SITES = ("inputs", "scores", "exp", "probs", "row_sum", "rescale", "acc", "out", "lse")
NORMALIZE = ("divide", "reciprocal")
MAX_SHIFTS = ("none", "qiu-yao")
EXP2 = ("native", "poly1", "poly2", "poly3", "poly4", "poly5")
ACC_UPDATES = ("each", "once")
KNOBS = ("matmul_acc", "reduction_chunk", "normalize", "max_shift", "exp2", "rescale_threshold", "lowbit", "mma",
         "mma_chain", "acc_update")
_FP32 = PRESETS["fp32"]
_FP64 = PRESETS["fp64"]


@dataclass(frozen=True, kw_only=True)
class Policy:
    """One FloatFormat per rounding site, plus the matmul accumulation model."""

    inputs: FloatFormat
    scores: FloatFormat
    exp: FloatFormat
    probs: FloatFormat
    row_sum: FloatFormat
    rescale: FloatFormat
    acc: FloatFormat
    out: FloatFormat
    lse: FloatFormat | None = None  # None: row_sum's format
    matmul_acc: FloatFormat | None = None
    reduction_chunk: int | None = None
    normalize: str = "divide"
    max_shift: str = "none"
    exp2: str = "native"
    rescale_threshold: float | None = None
    lowbit: object | None = None
    mma: str | None = None
    mma_chain: bool = True
    acc_update: str = "each"
    name: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.lse is None:
            object.__setattr__(self, "lse", self.row_sum)
        for site in SITES:
            object.__setattr__(self, site, get_format(getattr(self, site), param=f"policy.{site}"))
        if self.matmul_acc is not None:
            object.__setattr__(self, "matmul_acc", get_format(self.matmul_acc, param="policy.matmul_acc"))
        if self.reduction_chunk is not None and (
            not isinstance(self.reduction_chunk, int) or self.reduction_chunk < 1
        ):
            raise AttnumInputError(
                f"reduction_chunk={self.reduction_chunk!r} is not allowed; expected a positive integer or None"
            )
        if self.normalize not in NORMALIZE:
            raise AttnumInputError(f"normalize={self.normalize!r} is not allowed; expected one of {NORMALIZE}")
        if self.max_shift not in MAX_SHIFTS:
            raise AttnumInputError(f"max_shift={self.max_shift!r} is not allowed; expected one of {MAX_SHIFTS}")
        if self.exp2 not in EXP2:
            raise AttnumInputError(f"exp2={self.exp2!r} is not allowed; expected one of {EXP2}")
        t = self.rescale_threshold
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not (0 < t < float("inf")):
                raise AttnumInputError(f"rescale_threshold={t!r} is not allowed; expected a positive finite number "
                                       "of log2 units (FA4: 8.0), or none")
            object.__setattr__(self, "rescale_threshold", float(t))
        if not isinstance(self.mma_chain, bool):
            raise AttnumInputError(f"mma_chain={self.mma_chain!r} is not allowed; expected on or off")
        if self.acc_update not in ACC_UPDATES:
            raise AttnumInputError(f"acc_update={self.acc_update!r} is not allowed; expected one of {ACC_UPDATES}")
        if self.mma is not None:
            from attnum.numerics.mma.sites import check_arch, operand_dtypes

            object.__setattr__(self, "mma", check_arch(self.mma, param="policy.mma"))
            if self.mma is not None:  # the two products' operand pairs: Q K^T (and dO V^T), P V (and dS K)
                operand_dtypes(self.inputs, self.inputs, arch=self.mma)
                operand_dtypes(self.probs, self.inputs, arch=self.mma, a_site="probs")

    @functools.cached_property  # frozen: computed once per policy (asked for on every tile)
    def carrier(self) -> torch.dtype:
        """float32 when everything fits in fp32 and matmuls accumulate natively in fp32."""
        fits = all(getattr(self, s).fits_in(_FP32) for s in SITES)
        native32 = self.matmul_acc == _FP32 or self.mma is not None  # an MMA's output is fp32
        return torch.float32 if fits and native32 else torch.float64

    @property
    def matmul_mode(self) -> str:
        """``exact`` (float64, rounded once), ``native`` (one BLAS call in the carrier's format),
        ``emulated`` (chunked exact sums rounded into ``matmul_acc`` after each chunk) or ``mma`` (the
        tensor-core instructions of ``mma``'s architecture)."""
        if self.mma is not None:
            return "mma"
        if self.matmul_acc is None:
            return "exact"
        carrier_fmt = _FP32 if self.carrier == torch.float32 else _FP64
        return "native" if self.matmul_acc == carrier_fmt else "emulated"

    def round(self, site: str, x: torch.Tensor) -> torch.Tensor:
        """Round ``x`` to the format of ``site`` (nearest-even); a no-op when the carrier holds it exactly."""
        return round_to(x, getattr(self, site))

    def with_overrides(self, **sites: str | FloatFormat | int | None) -> Policy:
        unknown = set(sites) - set(SITES) - set(KNOBS)
        if unknown:
            raise AttnumInputError(
                f"policy override {sorted(unknown)!r} is not allowed; {did_you_mean(sorted(unknown)[0], (*SITES, *KNOBS))}"
                f"expected sites {SITES} or one of {KNOBS}"
            )
        return dataclasses.replace(self, **sites, name=_describe(self.name, sites))

    def describe(self) -> dict[str, object]:
        d = {s: getattr(self, s).name for s in SITES}
        d["matmul_acc"] = self.matmul_acc.name if self.matmul_acc else "exact"
        d["reduction_chunk"] = self.reduction_chunk
        d["normalize"] = self.normalize
        d["max_shift"] = self.max_shift
        if self.exp2 != "native" or self.rescale_threshold is not None:
            d["exp2"], d["rescale_threshold"] = self.exp2, self.rescale_threshold
        if self.lowbit is not None:
            d["lowbit"] = self.lowbit.describe()
        if self.mma is not None:
            d["mma"] = self.mma
            if not self.mma_chain:
                d["mma_chain"] = "off"
        if self.acc_update != "each":
            d["acc_update"] = self.acc_update
        d["carrier"] = str(self.carrier).replace("torch.", "")
        return d


def _describe(base: str, overrides: dict) -> str:
    def text(k, v):
        if k == "mma_chain":
            return "on" if v else "off"
        return getattr(v, "name", v)

    extra = ",".join(f"{k}={text(k, v)}" for k, v in overrides.items() if k != "lowbit")
    return f"{base},{extra}" if extra else base


def _acc_for(fmt: FloatFormat) -> FloatFormat:
    """Hardware matmuls accumulate narrow formats in fp32; wider ones in fp64."""
    return _FP32 if fmt.fits_in(_FP32) else _FP64


def uniform(fmt: str | FloatFormat) -> Policy:
    """Every site in ``fmt`` (the paper's re-implementation); matmuls accumulate as hardware does."""
    f = get_format(fmt)
    # The LSE is not part of the forward output (the paper's re-implementation is forward-only);
    # for a backward it is stored as every kernel stores it, in fp32 (or wider).
    sites = {s: f for s in SITES if s != "lse"}
    return Policy(**sites, lse=_acc_for(f), matmul_acc=_acc_for(f), name=f"uniform:{f.name}")


def fa2(fmt: str | FloatFormat) -> Policy:
    """FlashAttention-2/3 kernels: inputs, P for the PV matmul and the output in ``fmt``; scores,
    exponentials feeding l, the statistics and the accumulator in fp32; O scaled by 1/l."""
    f = get_format(fmt)
    wide = _FP32 if f.fits_in(_FP32) else f
    return Policy(
        inputs=f, scores=wide, exp=wide, probs=f, row_sum=wide, rescale=wide, acc=wide, out=f,
        matmul_acc=_acc_for(f), normalize="reciprocal", name=f"fa2:{f.name}",
    )


def torch_cpu(fmt: str | FloatFormat) -> Policy:
    """PyTorch's CPU flash kernel (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp): intermediates
    in the op-math type (fp32 for bf16/fp16), exp(qk - max) then summed in fp32, qk converted to the
    input type for the PV GEMM accumulating into an fp32 buffer, output = buffer * (1 / sum)."""
    f = get_format(fmt)
    p = fa2(f)
    return dataclasses.replace(p, name=f"torch-cpu:{f.name}")


def torch_eager(fmt: str | FloatFormat) -> Policy:
    """PyTorch eager attention in ``fmt`` (``softmax(Q K^T * scale) V`` op by op, as
    :func:`attnum.attention.eager.eager_attention` and the math SDPA of a training baseline run it):
    Q K^T a GEMM accumulating in fp32 and returned in ``fmt`` (scores); softmax upcasts to fp32
    (max, exp, sum and the division in fp32) and returns ``fmt`` (probs); P V accumulates in fp32
    (acc) and returns ``fmt`` (out). The scale is exact when it is a power of two (d = 4**k);
    otherwise torch rounds the scaled scores a second time, which this policy does not model."""
    f = get_format(fmt)
    wide = _FP32 if f.fits_in(_FP32) else f
    return Policy(
        inputs=f, scores=f, exp=wide, probs=f, row_sum=wide, rescale=wide, acc=wide, out=f, lse=wide,
        matmul_acc=_acc_for(f), normalize="divide", name=f"torch-eager:{f.name}",
    )


def fa4(fmt: str | FloatFormat) -> Policy:
    """FlashAttention-4 (Blackwell): FA2's formats, exp2 by the degree-3 polynomial and the running
    maximum rescaled only past 8 log2 units (``flash_attn/cute/flash_fwd_sm100.py``, 16-bit inputs)."""
    return dataclasses.replace(fa2(fmt), exp2="poly3", rescale_threshold=8.0, name=f"fa4:{get_format(fmt).name}")


def _sage(key: str):
    def make(fmt: str | FloatFormat) -> Policy:
        """SageAttention's published configuration (:data:`attnum.numerics.lowbit.SAGE`) with inputs and
        output in ``fmt``; fp32 softmax statistics and accumulator buffer."""
        from attnum.numerics.lowbit import SAGE

        f = get_format(fmt)
        lb = SAGE[key]
        probs = get_format(lb.pv) if lb.pv not in ("int8", "nvfp4") else _FP32
        return Policy(inputs=f, scores=_FP32, exp=_FP32, probs=probs, row_sum=_FP32, rescale=_FP32, acc=_FP32,
                      out=f, matmul_acc=_FP32, normalize="divide", lowbit=lb, name=f"{key}:{f.name}")
    make.__name__ = key.replace("-", "_")
    return make


SAGE_NAMES = ("sage1", "sage2", "sage2-4b", "sage3")
NAMED = {"uniform": uniform, "fa2": fa2, "torch-cpu": torch_cpu, "torch-eager": torch_eager, "fa4": fa4,
         **{k: _sage(k) for k in SAGE_NAMES}}


def parse_policy(spec: str | Policy, fmt: str | FloatFormat | None = None) -> Policy:
    """``NAME:FORMAT[,site=FORMAT...]``; ``NAME`` alone takes ``fmt``; a bare format means uniform.

    Examples: ``fa2:bf16``, ``uniform:e4m3fn``, ``torch-cpu:fp16``, ``torch-eager:bf16``, ``fp32``,
    ``fa2:bf16,acc=fp16,reduction_chunk=16``, ``uniform:bf16,max_shift=qiu-yao``, ``fa2:bf16,mma=sm90``.
    """
    if isinstance(spec, Policy):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise AttnumInputError(f"policy={spec!r} is not allowed; expected NAME:FORMAT with NAME in {list(NAMED)}")
    head, *over = [part.strip() for part in spec.split(",")]
    name, _, fmt_name = head.partition(":")
    name = name.strip().lower()
    if name in NAMED:
        if not fmt_name:
            if fmt is None:
                raise AttnumInputError(f"policy={spec!r} names no format; write {name}:FORMAT or pass --format")
            fmt_name = fmt
        policy = NAMED[name](get_format(fmt_name, param="policy format"))
    elif not fmt_name:
        try:
            policy = uniform(get_format(name))
        except AttnumInputError:
            raise AttnumInputError(
                f"policy={spec!r} is not allowed; {did_you_mean(name, NAMED)}expected NAME:FORMAT with NAME in "
                f"{list(NAMED)}, or a format"
            ) from None
    else:
        raise AttnumInputError(f"policy={spec!r} is not allowed; {did_you_mean(name, NAMED)}expected NAME in "
                               f"{list(NAMED)}")
    overrides: dict[str, object] = {}
    for item in over:
        key, eq, value = item.partition("=")
        if not eq:
            raise AttnumInputError(f"policy override {item!r} is not allowed; expected site=FORMAT")
        key = key.strip()
        if key in overrides:  # acc=fp16,acc=fp32: which one was meant? never the last silently
            raise AttnumInputError(f"policy={spec!r} is not allowed; override {key!r} is given twice, "
                                   "expected each site at most once")
        if key == "reduction_chunk":
            overrides[key] = None if value in ("", "none") else _int(value, key)
        elif key == "matmul_acc":
            overrides[key] = None if value in ("exact", "none") else get_format(value, param=key)
        elif key == "mma":
            from attnum.numerics.mma.sites import check_arch

            overrides[key] = check_arch(value, param="mma")
        elif key in ("normalize", "max_shift", "exp2", "acc_update"):
            overrides[key] = value
        elif key == "mma_chain":
            if value.strip().lower() not in ("on", "off", "true", "false"):
                raise AttnumInputError(f"mma_chain={value!r} is not allowed; expected on or off")
            overrides[key] = value.strip().lower() in ("on", "true")
        elif key == "rescale_threshold":
            overrides[key] = None if value in ("", "none") else _float(value, key)
        elif key in _LOWBIT_KEYS:
            from attnum.numerics.lowbit import LowBit, parse_lowbit_override

            lb = overrides.get("lowbit", policy.lowbit)
            if lb is None:
                raise AttnumInputError(f"policy override {item!r} is not allowed; {key} needs a sage policy "
                                       f"(one of {SAGE_NAMES})")
            overrides["lowbit"] = parse_lowbit_override(lb if isinstance(lb, LowBit) else LowBit(), key, value)
        else:
            overrides[key] = get_format(value, param=f"policy.{key}")
    return policy.with_overrides(**overrides) if overrides else policy


_LOWBIT_KEYS = ("qk", "granularity", "block_q", "block_k", "warp_q", "smooth_k", "smooth_q", "pv", "pv_acc",
                "two_level")


def _float(value: str, key: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise AttnumInputError(f"{key}={value!r} is not allowed; expected a number") from None


def _int(value: str, key: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise AttnumInputError(f"{key}={value!r} is not allowed; expected an integer") from None
