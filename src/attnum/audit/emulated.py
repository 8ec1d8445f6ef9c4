"""Judging a kernel against attnum's emulation of its designed arithmetic (a declared ``emulation``).

The verdict rule (:mod:`attnum.audit.verdict`) asks whether a kernel's error is what a kernel *of the
stated dtype* makes. A low-bit kernel is not one: SageAttention's INT8 Q K^T misses fp16 bounds by
design. When a target declares ``emulation = "sage1"`` (or the audit is given ``--emulation sage1``),
each forward case is judged instead against ``flash:sage1:<dtype>`` -- attnum's bit-level emulation
of that arithmetic (:mod:`attnum.attention.lowbit.sage`) -- on the same inputs, with the same causal
alignment, scale and empty-row convention:

    |t_i - e_i| <= floor_ulps * ulp(fmt, max |e|)   for every element,

non-finite outputs failing where the emulation is finite (and the reverse). The tolerance is the
audit's ulp floor (default 2) at the output's scale: the emulation rounds every fp32 operation as the
kernel does, but not necessarily in the kernel's order (row sums, exp2), so its fp32 intermediates
differ from the kernel's by a few fp32 ulps; the output, rounded once to the dtype, then differs by at
most one ulp, and a flipped rounding of the fp16 MMA accumulator adds at most one more at the
output's scale (docs/lowbit.md). The verdict carries the kernel's distance from the emulation
(``target_error``), the emulation's own error against float64 (``baseline_error``: what the design
costs), and the tolerance (``bound``); its note also gives the kernel's error against float64.

A declared yardstick never turns a wrong answer into a silent pass. Every such verdict's note starts
with "judged against the declared arithmetic POLICY", and a case is ``pass`` only when the declared
arithmetic itself meets the audited dtype's rule (:func:`attnum.audit.verdict.judge` on the emulation's
output: what a kernel *of that dtype* may do). Where the emulation misses that rule (e4m3 declared for a
bf16 probe, or an INT8 Q K^T on a case that punishes it) a kernel equal to it gets ``note`` (``fail``
under --strict), with the emulation's own margin against the dtype's bound in the note.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from attnum.audit.verdict import Verdict, ulp
from attnum.kernels.conventions import emulation_policy
from attnum.numerics.formats import FloatFormat


def emulate(emulation: str, q, k, v, *, causal_alignment: str, attn_mask=None, is_causal=False,
            scale=None) -> torch.Tensor:
    """The emulation's output (float64) for what the target was asked."""
    from attnum.attention.flash import flash_attention

    out = flash_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                          policy=emulation_policy(emulation, q.dtype), causal_alignment=causal_alignment)
    return out.double()


def _max_abs(x: torch.Tensor) -> float:
    return float(x.abs().max()) if x.numel() else 0.0


def judge(target: torch.Tensor, emulated: torch.Tensor, golden: torch.Tensor, *, fmt: FloatFormat,
          ulps: float, emulation: str) -> Verdict:
    """The rule of the module docstring; all tensors (B, H, N, dv), compared in float64."""
    t, e, g = target.double(), emulated.double(), golden.double()
    if t.shape != e.shape:
        return Verdict(status="fail", target_error=math.inf, baseline_error=math.nan, bound=math.nan,
                       note=f"output shape {tuple(t.shape)} != expected {tuple(e.shape)}")
    fin_e, fin_t, fin_g = torch.isfinite(e), torch.isfinite(t), torch.isfinite(g)
    e_err = _max_abs((e - g)[fin_e & fin_g])
    bound = ulps * ulp(fmt, _max_abs(e[fin_e]))
    vs_gold = _max_abs((t - g)[fin_t & fin_g])
    note = f"judged against the declared arithmetic {emulation}; kernel vs float64 {vs_gold:.3g}"
    for bad, what in ((fin_e & ~fin_t, "non-finite output where the emulation is finite"),
                      (~fin_e & fin_t, "finite output where the emulation is not")):
        if bool(bad.any()):
            return Verdict(status="fail", target_error=math.inf, baseline_error=e_err, bound=bound,
                           note=f"{what} in {int(bad.sum())} element(s); {note}")
    diff = (t - e)[fin_e].abs()
    err = _max_abs(diff)
    if err > 0:
        note += f"; {int((diff > 0).sum())} of {diff.numel()} element(s) differ"
    return Verdict(status="pass" if err <= bound else "fail", target_error=err, baseline_error=e_err,
                   bound=bound, note=note)


def verdict(ctx, out, golden, q, k, v, kw: dict, ref_kw: dict, dtype_rule=None) -> Verdict:
    """One forward case of ``ctx`` (an attnum.audit.harness.ProbeContext with ``emulation`` set): the
    target's ``out`` judged against the emulation; ``golden`` already holds the declared empty rows.
    ``dtype_rule``: tensor -> the audited dtype's verdict on it; a pass whose emulation fails it becomes
    ``note`` (``fail`` under --strict): the module docstring's last paragraph."""
    try:
        e = emulate(ctx.emulation, q, k, v, causal_alignment=ctx.causal_alignment, **kw)
    except Exception as exc:  # noqa: BLE001 - the emulation cannot express this case: nothing to compare
        nan = math.nan
        return Verdict(status="unsupported", target_error=nan, baseline_error=nan, bound=nan,
                       note=f"emulation {ctx.emulation}: {type(exc).__name__}: {exc}".splitlines()[0][:300])
    if ctx.empty_rows != "zeros" and out.shape == golden.shape:
        empty = ctx.empty(q, k, ref_kw).unsqueeze(-1)
        e = torch.where(empty, golden, e)
        if ctx.empty_rows == "any":  # don't care: those rows are not compared
            out = torch.where(empty, golden, out.double())
    v_e = judge(out, e, golden, fmt=ctx.fmt, ulps=ctx.floor_ulps, emulation=ctx.emulation)
    if v_e.status != "pass" or dtype_rule is None:
        return v_e
    own = dtype_rule(e)
    if own.passed and own.status != "note":
        return v_e
    return replace(v_e, status="fail" if getattr(ctx, "strict", False) else "note",
                   note=f"{v_e.note}; a pass only against the declared arithmetic: {ctx.emulation} itself misses "
                        f"the {ctx.fmt.name} bound ({_ratio(own.ratio)} of it; its error vs float64 "
                        f"{own.target_error:.3g}), fails under --strict")


def _ratio(r: float) -> str:
    """A margin readable at any size: "87%", "3.2e+05 %"."""
    if not math.isfinite(r):
        return "inf"
    return f"{r:.0%}" if r < 1e4 else f"{r * 100:.2g} %"
