"""Merge cases in the target's own empty-state convention, and merges of n states (chains).

The probes in :mod:`attnum.audit.serving` write an empty state as (0, -inf). A library may mark one
otherwise: FA2's non-split forward with +inf (Dao-AILab/flash-attention#978), FlashInfer before
flashinfer#4401 with the finite sentinel -5e4 (its Triton ``merge_states`` still starts from it); its
LSE may be natural or base 2. :func:`empty` writes the state the target declares (``lse_base``,
``empty_lse``: attnum.kernels.serving), so a probe tests the input the kernel is built for.

:func:`chain_case` judges the merge of n states in order: through the target's ``merge_states`` entry
(one call: FlashInfer's n-way merge, a ring rank's loop of per-block updates) or, without one, by
feeding ``merge_state``'s result back into the next ``merge_state`` call (a rank merging block by
block). golden = attnum's merge of all n states in fp64 (merges are associative in exact arithmetic);
baseline = attnum's fp32 merge, the same way (one n-way merge, or a chain whose every step rounds its O
to the audited dtype as the target's does).
"""

from __future__ import annotations

import torch

from attnum.attention.serving.merge import State, merge_states
from attnum.audit.harness import Case, ProbeContext, check_tensor, raised
from attnum.audit.serving import FP32, _judge, _pair, unsupported, worst
from attnum.kernels.serving import conventions, entry


def empty(ctx: ProbeContext, shape: tuple[int, ...], dv: int) -> State:
    """The empty state (0, the declared empty LSE) of shape (..., dv) in float64."""
    _, empty_lse = conventions(ctx.target)
    return State(torch.zeros(*shape, dv, dtype=torch.float64), torch.full(shape, empty_lse, dtype=torch.float64))


def chain_case(ctx: ProbeContext, label: str, states: list[State]) -> Case:
    """Verdict for the merge of ``states`` (each o (T, H, dv), lse (T, H) float64) in the order given."""
    n_way = entry(ctx.target, "merge_states")
    two = entry(ctx.target, "merge_state")
    if n_way is None and two is None:
        return unsupported(label, "target has no merge_state or merge_states entry point (attnum.kernels.serving)")
    base, empty_lse = conventions(ctx.target)
    dev = ctx.device
    ins = [(s.o.to(ctx.dtype), s.lse.float()) for s in states]
    shape_o, shape_l = ins[0][0].shape, ins[0][1].shape
    try:
        if n_way is not None:
            res = ctx.call_entry(n_way, label, torch.stack([o for o, _ in ins]).to(dev),
                                 torch.stack([lse for _, lse in ins]).to(dev))
            o, lse = _pair(res, "merge_states")
        else:
            o, lse = ins[0][0].to(dev), ins[0][1].to(dev)
            for o_b, l_b in ins[1:]:
                o, lse = _pair(ctx.call_entry(two, label, o, lse, o_b.to(dev), l_b.to(dev)), "merge_state")
                check_tensor(o, "merged o", shape_o, ctx.dtype, dev)
                check_tensor(lse, "merged lse", shape_l, torch.float32, dev)
        check_tensor(o, "merged o", shape_o, ctx.dtype, dev)
        check_tensor(lse, "merged lse", shape_l, torch.float32, dev)
    except Exception as exc:  # noqa: BLE001 - any exception from the kernel (or a wrong output) is its verdict
        return ctx._case(label, raised(exc))
    kw = dict(lse_base=base, empty_lse=empty_lse)
    gold = merge_states(ins, policy="fp64", **kw)
    fp32 = f"fp32,out={ctx.fmt.name}"
    if n_way is not None:
        base_m = merge_states(ins, policy=fp32, **kw)
    else:
        base_m = State(*ins[0])
        for st in ins[1:]:
            m = merge_states([base_m, st], policy=fp32, **kw)
            base_m = State(m.o.to(ctx.dtype), m.lse.float())
    v = worst(_judge(o, gold.o, base_m.o, ctx.fmt, ctx, "o"), _judge(lse, gold.lse, base_m.lse, FP32, ctx, "lse"))
    how = "merge_states" if n_way is not None else "merge_state chained"
    return ctx.finish(f"{label} ({how})", v)
