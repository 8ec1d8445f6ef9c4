"""A row's result must not depend on the rest of the batch.

Models Dao-AILab/flash-attention#2573 (a varlen split-KV early exit wrote LSE into *other* sequences'
rows) and the general hazard that a kernel's reduction strategy changes with batch size, so a
request's output depends on who it is batched with. Batch element 0
alone is compared bit for bit with batch element 0 of a batch of 4. Reported as behaviour; fails only
under --strict. The causal case has N != S, so it is judged with the declared causal alignment
(a bottom-right kernel judged top-left used to fail here with error 2.4).
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.verdict import Verdict

B, H, N, S, D = 4, 2, 128, 160, 64


def run(ctx: ProbeContext) -> list[Case]:
    bctx = ctx.as_behaviour()
    q, k, v = ctx.cast(ctx.randn(B, H, N, D, salt=1), ctx.randn(B, H, S, D, salt=2),
                       ctx.randn(B, H, S, D, salt=3))
    cases = []
    for causal in (False, True):
        full = ctx.call(q, k, v, is_causal=causal, label=f"B={B} causal={causal}")[:1]
        alone = ctx.call(q[:1], k[:1], v[:1], is_causal=causal, label=f"B=1 causal={causal}")
        diff = float((full - alone).abs().nan_to_num(nan=float("inf")).max())
        same = bool((full == alone).all())
        verdict = Verdict(status="pass" if same else "fail", target_error=diff, baseline_error=0.0,
                          bound=0.0, note="" if same else "batch element 0 changes with the batch")
        cases.append(bctx.finish(f"B=1 vs B={B}, causal={causal}", verdict))
        # The alone result must also be right, so invariance is not satisfied by a constant.
        cases.append(ctx.check(f"B=1 causal={causal}", q[:1], k[:1], v[:1], is_causal=causal, out=alone))
    return cases


PROBE = Probe(
    name="batch-invariance",
    summary="batch element 0 alone == element 0 of a batch of 4, bitwise (behaviour)",
    refs=("Dao-AILab/flash-attention#2573",),
    run=run,
    kind="behaviour",
)
