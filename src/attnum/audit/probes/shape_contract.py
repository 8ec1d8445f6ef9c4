"""The shapes a kernel is handed: N != S, a value head dim other than the key's, and storage past the end.

A kernel written for one shape family answers others silently: a loop bounded by N where S belongs (the
keys past N never read, or queries past S reading garbage), V read with K's head dim, or a last tile
loaded without its bound. Each of these gives a tensor of the right shape and wrong values. The probe
asks for what SDPA allows -- N != S both ways, dv != d -- and accepts either the right answer or a loud
refusal (any exception: "unsupported", with its message); a silent wrong answer fails and the case says
which shape it was. Inputs whose storage continues with NaN catch a read past the end of q, k or v
(in-process only: a kernel server receives values, not storage); an interpreted Triton kernel's access
outside its tensors is ``out of bounds`` from attnum's address check, in or out of process, never a refusal. Models jax-ml/jax#24491 (Pallas' GPU
``mha`` silently wrong for q_len 512 != kv_len 2048, not causal; fixed by jax-ml/jax#24495),
vllm-project/vllm#2622 (a head_dim read wrongly: the kernel ran without an error and wrote memory it did
not own), thu-ml/SageAttention#26 (1.0.3 took q's length for K too; it refuses q_len < 128, so the unequal
lengths include two at or above that tile), flash-attn 2's loud refusal of dv != d (Dao-AILab/flash-attention#753: the right answer to a
shape it lacks), and the unmasked tail loads of the odd-lengths probe, here past the tensor itself.
"""

from __future__ import annotations

from dataclasses import replace

from attnum.audit.construct import behind_nan
from attnum.audit.harness import Case, Probe, ProbeContext, raised
from attnum.audit.verdict import OUT_OF_BOUNDS, Verdict

H, D = 2, 64
SHAPES = (  # (N, S, dv)
    (5, 70, D),
    (70, 5, D),
    (1, 129, D),
    (65, 65, 32),
    (33, 65, 128),
    # N != S with both at or above a 128-row tile: a kernel that refuses lengths below its tile minimum (an
    # assert q_len >= 128, SageAttention 1.0.3's) never meets the shapes above; these reach it (thu-ml/
    # SageAttention#26: q_len 128, kv_len 256)
    (128, 256, D),
    (256, 128, D),
)
TAILS = ((65, 65), (1, 97), (97, 1))  # (N, S) of the storage-tail cases


CONTROL = (64, 64)  # (N, S): the square shape every kernel supports


def run(ctx: ProbeContext) -> list[Case]:
    n, s = CONTROL
    q, k, v = ctx.cast(ctx.randn(1, H, n, D, salt=299), ctx.randn(1, H, s, D, salt=309), ctx.randn(1, H, s, D, salt=319))
    cases = [_case(ctx, f"N=S={n} control" + (" causal" if causal else ""), q, k, v, causal) for causal in (False, True)]
    # a kernel that fails the square shape (an fp32 kernel computing in TF32) fails every shape for that
    # reason: its failures below are then not blamed on the shape
    square_ok = all(c.verdict.status != "fail" for c in cases)
    for i, (n, s, dv) in enumerate(SHAPES):
        q, k, v = ctx.cast(ctx.randn(1, H, n, D, salt=300 + i), ctx.randn(1, H, s, D, salt=310 + i),
                           ctx.randn(1, H, s, dv, salt=320 + i))
        for causal in (False, True):
            what = f"N={n} S={s}" + (f" dv={dv} != d={D}" if dv != D else "") + (" causal" if causal else "")
            case = _case(ctx, what, q, k, v, causal)
            cases.append(_blame(case, square_ok, f"silently wrong for {what}"))
    for n, s in TAILS:
        plain = ctx.cast(5 * ctx.randn(1, H, n, D, salt=330 + n), 3 * ctx.randn(1, H, s, D, salt=340 + s),
                         ctx.randn(1, H, s, D, salt=350 + s))
        for causal in (False, True):
            what = f"N={n} S={s} NaN behind q, k, v" + (" causal" if causal else "")
            case = _case(ctx, what, *(behind_nan(x) for x in plain), causal)
            if case.verdict.status == "fail":  # the same inputs without the NaN behind them: is it the tail?
                again = _case(replace(ctx, monitor=None), what, *plain, causal)
                why = ("read past the end of its inputs (the NaN behind them reached the output; the same "
                       "inputs without it pass)" if again.verdict.status != "fail"
                       else f"silently wrong for N={n} S={s}" + (" causal" if causal else ""))
                case = _blame(case, square_ok, why)
            cases.append(case)
    return cases


def _blame(case: Case, square_ok: bool, why: str) -> Case:
    """A failing case's note led by ``why`` -- or, when the square control failed too, by that."""
    if case.verdict.status != "fail":
        return case
    lead = why if square_ok else "fails as the square control does (not the shape)"
    return replace(case, verdict=replace(case.verdict, note=f"{lead}: {case.verdict.note}"))


def _case(ctx: ProbeContext, what: str, q, k, v, causal: bool) -> Case:
    """The target's answer judged; any exception is a refusal ("unsupported", its message kept) -- or, when
    attnum's Triton model raised it (a cast it does not model), "not judged"."""
    try:
        out = ctx.call(q, k, v, is_causal=causal, label=what)
    except Exception as exc:  # noqa: BLE001 - a loud refusal is the right answer to a shape it lacks
        found = raised(exc)
        if found.status == OUT_OF_BOUNDS:  # the Triton model caught the kernel outside its tensors
            return ctx._case(what, found)
        msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:240]
        # attnum's interpreter model meeting what it cannot model is no refusal by the kernel
        why = "not judged" if "not modelled by attnum" in msg else "refused"
        nan = float("nan")
        return ctx._case(what, Verdict(status="unsupported", target_error=nan, baseline_error=nan, bound=nan,
                                       note=f"{why}: {msg}"))
    return ctx.check(what, q, k, v, is_causal=causal, out=out)


PROBE = Probe(
    name="shape-contract",
    summary="N != S both ways (also both >= 128), dv != d, NaN in the storage behind q, k, v: right, or refused, "
            "never silently wrong",
    refs=("jax-ml/jax#24491", "vllm-project/vllm#2622", "thu-ml/SageAttention#26", "Dao-AILab/flash-attention#753"),
    run=run,
)
