"""What a probe works with: the target, the references, the rule, and the shape of its result.

A probe is a function ``run(ctx) -> list[Case]``: it builds adversarial inputs (float64, then cast
to ``ctx.dtype``), asks ``ctx.check`` (forward) or ``ctx.check_grad`` (backward) for a verdict per
case, and returns them. The runner turns the worst case into the probe's row.

Conventions (attnum.kernels.conventions): every reference is built with the target's declared causal
alignment (``ctx.causal_alignment``) and empty-row output (``ctx.empty_rows``), so a probe that calls
``ctx.check`` / ``ctx.check_grad`` / ``ctx.expected`` honours them without knowing about them.
``ctx.call`` checks the output's type, shape, dtype and device (a mismatch fails the case) and tells
``ctx.monitor`` before and after each call of the target, so the isolating runner can name the case
a dead or silent target was in.

Shapes: q (B, H, N, d), k (B, G, S, d), v (B, G, S, dv).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from attnum.attention import masks
from attnum.audit import reference, terms
from attnum.audit.verdict import OUT_OF_BOUNDS, SEVERITY, Verdict, judge, terms_coefficient
from attnum.kernels.conventions import CAUSAL_ALIGNMENTS
from attnum.kernels.conventions import EMPTY_ROWS as EMPTY_ROW_CONVENTIONS
from attnum.kernels.triton.addresses import OutOfBounds
from attnum.numerics.formats import FloatFormat, get_format
from attnum.numerics.rounding import round_to
from attnum.sandbox.wire import WrongOutput, plain_tensor

PROBE_KINDS = ("forward", "backward", "behaviour")
FP32 = get_format("fp32")
__all__ = ["CAUSAL_ALIGNMENTS", "EMPTY_ROW_CONVENTIONS", "Case", "Probe", "ProbeContext", "WrongOutput", "raised"]


# Messages with which torch refuses an input a backend does not implement (not a bug: a limit).
_REFUSALS = ("No available kernel", "No viable backend", "not implemented for", "not supported")


# WrongOutput: the target returned something other than a (B, H, N, dv) tensor of the inputs' dtype
# on the audited device (or, through a kernel server, a gradient of the wrong shape): a failure of the
# case, whatever its values.

OUT_BUFFERS = ("out", "lse_out")  # keyword arguments a serving entry point writes into (accepts_out)


def _fresh(x):
    """A copy of a tensor (the target may write into what it is given), anything else as is. The whole
    storage is copied and viewed as ``x`` was (offset, strides), so what lies behind a tensor in its
    storage (the NaN the storage-tail probes put there) is behind the copy too."""
    if not isinstance(x, torch.Tensor):
        return x
    return torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage().clone(), x.storage_offset(),
                                                               x.size(), x.stride())


def raised(exc: BaseException) -> Verdict:
    """The verdict for a kernel that raised: "unsupported" for a declared limitation, "fail" for a
    wrong output (:class:`WrongOutput`), "out of bounds" for an interpreted Triton kernel's access
    outside its tensor (:class:`~attnum.kernels.triton.addresses.OutOfBounds`), else "error"."""
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    refused = isinstance(exc, NotImplementedError) or any(r in str(exc) for r in _REFUSALS)
    nan = math.nan
    if isinstance(exc, WrongOutput):
        return Verdict(status="fail", target_error=math.inf, baseline_error=nan, bound=nan, note=str(exc))
    if isinstance(exc, OutOfBounds):
        return Verdict(status=OUT_OF_BOUNDS, target_error=nan, baseline_error=nan, bound=nan,
                       note=str(exc).splitlines()[0][:500])
    return Verdict(status="unsupported" if refused else "error", target_error=nan, baseline_error=nan,
                   bound=nan, note=msg)


def check_output(out: object, q: torch.Tensor, v: torch.Tensor, device: str) -> torch.Tensor:
    """``out`` if it is what SDPA returns for q (B, H, N, d), v (B, G, S, dv) on ``device``: a tensor
    (B, H, N, dv) of q's dtype; otherwise :class:`WrongOutput` saying what differs."""
    return check_tensor(out, "output", (*q.shape[:-1], v.shape[-1]), q.dtype, device, dtype_from="the inputs'")


def check_tensor(out: object, what: str, shape: tuple[int, ...], dtype: torch.dtype, device: str, *,
                 dtype_from: str = "expected") -> torch.Tensor:
    """``out`` if it is a tensor of this shape and dtype on ``device``'s type; else :class:`WrongOutput`
    naming ``what`` and every difference."""
    if not isinstance(out, torch.Tensor):
        raise WrongOutput(f"target returned {type(out).__name__} for its {what}, expected a Tensor")
    plain = plain_tensor(out)  # in this process (--no-isolate) a subclass would see attnum's arithmetic on it
    if plain is None:
        raise WrongOutput(f"target returned a {type(out).__name__} ({str(out.layout).removeprefix('torch.')}) for "
                          f"its {what}, whose values torch does not hold; expected a dense torch.Tensor")
    out = plain
    shape = tuple(shape)
    problems = []
    if tuple(out.shape) != shape:
        problems.append(f"shape {tuple(out.shape)} != expected {shape}")
    if out.dtype != dtype:
        problems.append(f"dtype {out.dtype} != {dtype_from} {dtype}")
    if out.device.type != torch.device(device).type:
        problems.append(f"device {out.device.type} != the audited {torch.device(device).type}")
    if problems:
        raise WrongOutput(f"{what} " + "; ".join(problems))
    return out


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| over finite ref, inf if x is non-finite there (a baseline's own error)."""
    fin = torch.isfinite(ref)
    d = (x - ref)[fin].abs()
    return float(d.nan_to_num(nan=math.inf).max()) if d.numel() else 0.0


@dataclass(frozen=True, kw_only=True)
class Case:
    """One input the probe tried and its verdict."""

    label: str
    verdict: Verdict


@dataclass(frozen=True, kw_only=True)
class Probe:
    """A catalogue entry: one documented bug class and the function that hunts for it."""

    name: str
    summary: str
    refs: tuple[str, ...]
    run: Callable[[ProbeContext], list[Case]]
    kind: str = "forward"
    default: bool = True

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").isalnum():
            raise ValueError(f"{self.name=} must be a non-empty kebab-case word")
        if self.kind not in PROBE_KINDS:
            raise ValueError(f"{self.kind=} must be one of {PROBE_KINDS}")
        if not self.refs:
            raise ValueError(f"probe {self.name!r} must cite the documented bug it models (refs)")


@dataclass(frozen=True, kw_only=True)
class ProbeContext:
    """Everything a probe needs; immutable so probes cannot leak state into one another."""

    target: Callable[..., torch.Tensor]
    dtype: torch.dtype
    fmt: FloatFormat
    device: str = "cpu"
    k: float = 2.0
    k_grad: float = 5.0
    floor_ulps: float = 2.0
    strict: bool = False
    empty_rows: str = "zeros"
    causal_alignment: str = "top_left"
    seed: int = 0
    # A policy naming the target's designed arithmetic (a declared ``emulation``): forward cases are
    # judged against it instead of by the rule (attnum.audit.emulated).
    emulation: str | None = None
    # The GPU whose arithmetic an interpreted kernel runs under (attnum.kernels.triton.faithful), None for a native
    # target: the baseline of a target whose dots run on FP8 operands uses its tensor cores (attnum.audit.quantised).
    arch: str | None = None
    behaviour: bool = field(default=False, repr=False)
    # monitor(event, label, payload): "call" / "returned" around each call of the target, "case"
    # with each finished Case. The isolating runner forwards them to its parent.
    monitor: Callable[[str, str, object], None] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.empty_rows not in EMPTY_ROW_CONVENTIONS:
            raise ValueError(f"{self.empty_rows=} must be one of {EMPTY_ROW_CONVENTIONS}")
        if self.causal_alignment not in CAUSAL_ALIGNMENTS:
            raise ValueError(f"{self.causal_alignment=} must be one of {CAUSAL_ALIGNMENTS}")
        if self.k <= 0 or self.k_grad <= 0 or self.floor_ulps < 0:
            raise ValueError(f"{self.k=} and {self.k_grad=} must be positive, {self.floor_ulps=} >= 0")

    def as_behaviour(self) -> ProbeContext:
        """The same context whose failures are reported as notes unless --strict."""
        return replace(self, behaviour=True)

    def generator(self, salt: int = 0) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + salt)

    def randn(self, *shape: int, salt: int = 0) -> torch.Tensor:
        """Seeded float64 N(0, 1) on CPU; probes scale and shift it."""
        return torch.randn(*shape, generator=self.generator(salt), dtype=torch.float64)

    def cast(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Round float64 inputs to the audited dtype (the values every reference then sees): once,
        correctly, by ``round_to`` -- torch's float64 -> bf16/fp16 cast rounds twice through float32."""
        return tuple(round_to(x.double(), self.fmt).to(self.dtype) for x in xs)

    def received(self, q, k, v) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q, k, v) as the target's kernel computes with them: the inputs, or what its declared FP8 cache and
        queries hold (attnum.audit.quantised). Every reference reads these."""
        from attnum.audit import quantised

        return quantised.received(self.target, self.fmt, q, k, v)

    def _tell(self, event: str, label: str, payload: object = None) -> None:
        if self.monitor is not None:
            self.monitor(event, label, payload)

    def call_entry(self, fn: Callable, label: str, *args, **kw):
        """``fn(*args, **kw)`` (a serving entry point of the target) inside the heartbeat. The target gets
        copies of the tensors (a target that overwrote its inputs would otherwise rewrite the values the
        references then read); the ``out`` / ``lse_out`` buffers are its own to write."""
        args = tuple(_fresh(a) for a in args)
        kw = {k: v if k in OUT_BUFFERS else _fresh(v) for k, v in kw.items()}
        self._tell("call", label)
        out = fn(*args, **kw)
        self._tell("returned", label)
        return out

    def call(self, q, k, v, *, label: str = "", **kw) -> torch.Tensor:
        """Run the target on the device; the result, checked (:func:`check_output`), comes back as a
        float64 CPU tensor. ``label`` names the case for the heartbeat."""
        dev = self.device
        mask = kw.pop("attn_mask", None)
        mask = _fresh(mask).to(dev) if mask is not None else None
        self._tell("call", label)
        # copies: a target that overwrote q, k, v (zeros in, zeros out) would make the golden agree with it
        out = self.target(_fresh(q).to(dev), _fresh(k).to(dev), _fresh(v).to(dev), attn_mask=mask, **kw)
        self._tell("returned", label)
        return check_output(out, q, v, dev).detach().to("cpu", torch.float64)

    def finish(self, label: str, v: Verdict) -> Case:
        if self.behaviour and v.status == "fail" and not self.strict:
            v = replace(v, status="note", note=(v.note + "; " if v.note else "") + "fails under --strict")
        return self._case(label, v)

    def _case(self, label: str, v: Verdict) -> Case:
        case = Case(label=label, verdict=v)
        self._tell("case", label, case)
        return case

    def reference_kw(self, q, k, *, attn_mask=None, is_causal=False, scale=None) -> dict:
        """The references' keyword arguments for what the target was asked: ``is_causal`` with a
        declared bottom-right alignment and N != S becomes an explicit (N, S) mask (golden, baseline
        and the term sizes all read it; the target still gets ``is_causal=True``)."""
        N, S = q.shape[-2], k.shape[-2]
        if not (is_causal and self.causal_alignment == "bottom_right" and N != S):
            return {"attn_mask": attn_mask, "is_causal": is_causal, "scale": scale}
        keep = masks.causal_bool(N, S, "bottom_right")
        if attn_mask is None:
            mask = keep
        elif attn_mask.dtype == torch.bool:
            mask = attn_mask & keep
        else:
            mask = attn_mask.masked_fill(~keep, -math.inf)
        return {"attn_mask": mask, "is_causal": False, "scale": scale}

    def empty(self, q, k, ref_kw: dict) -> torch.Tensor:
        """Bool (B, H, N): the rows with no key to attend to, under the references' masking."""
        B, H, N = q.shape[:3]
        return masks.masking(ref_kw["attn_mask"], ref_kw["is_causal"], (B, H, N, k.shape[-2])).empty_rows() \
            .expand(B, H, N)

    def expected(self, q, k, v, *, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
        """Golden output with the declared causal alignment; empty rows hold the declared value
        (0, NaN, or the mean of V over every key; "any" leaves golden's 0, and ``check`` ignores them)."""
        kw = self.reference_kw(q, k, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
        g = reference.golden(q, k, v, **kw)
        if self.empty_rows in ("nan", "mean-v"):
            empty = self.empty(q, k, kw).unsqueeze(-1)
            if self.empty_rows == "nan":
                g = g.masked_fill(empty, math.nan)
            elif k.shape[-2] > 0:  # S = 0: nothing to average, golden's 0 stands
                mean = masks.expand_kv(v.double(), g.shape[1]).mean(dim=-2, keepdim=True)  # (B, H, 1, dv)
                g = torch.where(empty, mean.expand_as(g), g)
        return g

    def check(self, label: str, q, k, v, *, attn_mask=None, is_causal=False, scale=None,
              enable_gqa=False, clean=None, out=None, score_order: bool = False,
              extra_floor: torch.Tensor | None = None) -> Case:
        """Verdict for one forward case. ``clean`` = (q, k, v) whose golden stands for this input
        (the NaN-planting probe); ``out`` = a target output already computed. ``score_order``: also
        allow what the summation order of the q . k dot can do (terms.score_order_terms x c(fp32, d));
        ``extra_floor``: such an allowance (B, H, N, dv), computed by the probe, when its reference input
        is a rewrite whose scores are not the target's q . k (the score-feature probes)."""
        kw = {"attn_mask": attn_mask, "is_causal": is_causal, "scale": scale}
        if out is None:
            call_kw = {**kw, "enable_gqa": True} if enable_gqa else kw
            try:
                out = self.call(q, k, v, label=label, **call_kw)
            except Exception as exc:  # noqa: BLE001 - any exception from the kernel is its verdict
                return self._case(label, raised(exc))
        # the values the kernel computed with (a declared FP8 cache / FP8 queries: attnum.audit.quantised); a
        # rewrite built from them (the score-feature probes) is unchanged by this (the quantisation is idempotent)
        rq, rk, rv = self.received(*(clean if clean is not None else (q, k, v)))
        ref_kw = self.reference_kw(rq, rk, **kw)
        g = self.expected(rq, rk, rv, **kw)
        b = self._baseline(rq, rk, rv, ref_kw)
        empty = None
        if self.empty_rows != "zeros" and out.shape == g.shape:
            empty = self.empty(rq, rk, ref_kw).unsqueeze(-1)
            b = torch.where(empty, g, b)
        t_o, n = terms.output_terms(rq, rk, rv, **ref_kw)
        extra = None
        if score_order:
            extra = terms.score_order_terms(rq, rk, rv, **ref_kw) * terms_coefficient(FP32, rq.shape[-1])
        if extra_floor is not None:
            extra = extra_floor if extra is None else extra + extra_floor

        def dtype_rule(x: torch.Tensor) -> Verdict:  # the rule for a kernel of the audited dtype
            if empty is not None and self.empty_rows == "any":  # don't care: empty rows are not compared
                x = torch.where(empty, g, x.double())
            return judge(x, g, b, fmt=self.fmt, k=self.k, floor_ulps=self.floor_ulps, terms=t_o, n_terms=n,
                         extra_floor=extra)

        if self.emulation:  # judged against the declared emulation (attnum.audit.emulated)
            from attnum.audit import emulated

            return self.finish(label, emulated.verdict(self, out, g, rq, rk, rv, kw, ref_kw, dtype_rule=dtype_rule))
        return self.finish(label, dtype_rule(out))

    def _baseline(self, q, k, v, ref_kw: dict) -> torch.Tensor:
        """The same-precision baseline (float64) on the received values: FA's out_pt, or, for a target whose GEMMs
        run on FP8 operands, a kernel of that design (attnum.audit.quantised.baseline)."""
        from attnum.audit import quantised

        if quantised.fp8_operands(self.target):
            return quantised.baseline(self.target, self.fmt, q, k, v, arch=self.arch, **ref_kw)
        return reference.baseline(q, k, v, **ref_kw).double()

    def check_grad(self, label: str, q, k, v, *, attn_mask=None, is_causal=False, scale=None,
                   row_weight: torch.Tensor | None = None) -> Case:
        """Verdict for dq, dk, dv of loss = sum(out * w), w ~ N(0,1) seeded, times ``row_weight``
        (B, H, N) so a loss can ignore rows. Golden: float64 autograd through golden attention, with
        each element's term sizes (attnum.audit.terms); baseline: the less accurate of autograd
        through the same-precision baseline and FA2's recompute-from-LSE backward
        (see attnum.audit.reference); multiplier ``k_grad``. Under an empty-row convention other
        than zeros the loss ignores empty rows (their output, hence its gradient, is not golden's)."""
        kw = {"attn_mask": attn_mask, "is_causal": is_causal, "scale": scale}
        ref_kw = self.reference_kw(q, k, **kw)
        shape = (*q.shape[:-1], v.shape[-1])
        w = self.randn(*shape, salt=7)
        if row_weight is not None:
            w = w * row_weight.unsqueeze(-1).double()
        if self.empty_rows != "zeros":
            w = w.masked_fill(self.empty(q, k, ref_kw).unsqueeze(-1), 0.0)
        # dO is an input of the backward: rounded once to the dtype, the same values for every
        # implementation (the target receives it in its output's dtype anyway).
        w = w.to(self.dtype).double()

        def grads(fn, xs, dev, call_kw, is_target=False):
            xs = [_fresh(x.detach()).to(dev).requires_grad_(True) for x in xs]
            mask = _fresh(call_kw["attn_mask"]).to(dev) if call_kw["attn_mask"] is not None else None
            if is_target:
                self._tell("call", label)
            o = fn(*xs, **dict(call_kw, attn_mask=mask))
            if is_target:
                check_output(o, xs[0], xs[2], dev)
            if not isinstance(o, torch.Tensor) or o.grad_fn is None:
                raise NotImplementedError("target output carries no autograd graph")
            (o.double() * w.to(dev)).sum().backward()
            if is_target:
                self._tell("returned", label)
            return [(x.grad if x.grad is not None else torch.zeros_like(x)).detach().to("cpu", torch.float64)
                    for x in xs]

        try:
            t = grads(self.target, (q, k, v), self.device, kw, is_target=True)
        except Exception as exc:  # noqa: BLE001 - any exception from the kernel is its verdict
            return self._case(label, raised(exc))
        gold = terms.grad_terms(q, k, v, w, **ref_kw)
        g = gold.grads
        b_eager = grads(reference.baseline, (q, k, v), "cpu", ref_kw)
        b_fa2 = reference.fa2_grads(q, k, v, w, **ref_kw)
        worst = None
        for i, name in enumerate(("dq", "dk", "dv")):
            # The baseline is the less accurate of the two standard same-precision algorithms.
            bb = max((b_eager[i], b_fa2[i]), key=lambda x: _err(x, g[i]))
            vd = judge(t[i], g[i], bb, fmt=self.fmt, k=self.k_grad, floor_ulps=self.floor_ulps,
                       terms=gold.terms[i], n_terms=gold.n[i])
            vd = replace(vd, note=f"{name}" + (f": {vd.note}" if vd.note else ""))
            if worst is None or (SEVERITY[vd.status], vd.ratio) > (SEVERITY[worst.status], worst.ratio):
                worst = vd
        return self.finish(label, worst)
