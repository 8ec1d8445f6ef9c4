"""The same call twice must give bit-identical output.

Models the run-to-run nondeterminism that makes FA-vs-baseline comparisons and training-divergence
studies unreproducible (the brief §1 needs "identical inputs for every implementation"; split-KV
and atomic-add reductions are the usual cause, cf. Dao-AILab/flash-attention#2573's split-KV paths).
Reported as behaviour; fails only under --strict. The numbers: max |run1 - run2| against a bound
of 0.
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.verdict import Verdict

B, H, N, S, D = 2, 4, 256, 256, 64


def run(ctx: ProbeContext) -> list[Case]:
    ctx = ctx.as_behaviour()
    q, k, v = ctx.cast(ctx.randn(B, H, N, D, salt=1), ctx.randn(B, H, S, D, salt=2),
                       ctx.randn(B, H, S, D, salt=3))
    cases = []
    for causal in (False, True):
        a = ctx.call(q, k, v, is_causal=causal)
        b = ctx.call(q, k, v, is_causal=causal)
        diff = float((a - b).abs().nan_to_num(nan=float("inf")).max())
        same = bool(((a == b) | (a.isnan() & b.isnan())).all())
        v_ = Verdict(status="pass" if same else "fail", target_error=diff, baseline_error=0.0, bound=0.0,
                     note="" if same else "two identical calls differ")
        cases.append(ctx.finish(f"twice, causal={causal}", v_))
    return cases


PROBE = Probe(
    name="determinism",
    summary="two identical calls are bit-identical (behaviour; fails under --strict)",
    refs=("Dao-AILab/flash-attention#2573",),
    run=run,
    kind="behaviour",
)
