"""Empty states written in the target's own convention (-inf, +inf or a finite sentinel; base e or 2)
must merge as empty: ``empty (+) live == live``, ``empty (+) empty == empty``.

The other merge probes write an empty state as (0, -inf). Libraries differ: FA2's non-split forward
marks rows with no key by lse = +inf (Dao-AILab/flash-attention#978; vLLM's ``merge_attn_states`` maps
+-inf to -inf to cope), FlashInfer used the finite sentinel -5e4 until flashinfer-ai/flashinfer#4401
(live states below it were lost: #4450) and its Triton ``merge_states`` still starts from (0, -5e4, 1);
FlashInfer's LSEs are base 2, flash-attn's and vLLM's natural. The target's declaration
(``lse_base``, ``empty_lse``: attnum.kernels.serving) picks the convention; the live LSEs are in its
base, and under a sentinel include states just above it (live, and easy to mistake for empty).
Merge targets: empty (+) live both orders, empty (+) empty where the convention is not -inf (for -inf
that is merge-two-empty's case), and three states [empty, live, empty] through ``merge_states`` where
the target has it.
"""

from __future__ import annotations

import math

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.merge_cases import chain_case, empty
from attnum.audit.serving import merge_case, missing, state
from attnum.kernels.serving import conventions, entry

T, H, DV = 6, 2, 32


def _name(base, empty_lse: float) -> str:
    kind = "sentinel " if math.isfinite(empty_lse) else ""
    return f"empty lse={kind}{empty_lse:g} base {base}"


def run(ctx: ProbeContext) -> list[Case]:
    no_merge = missing(ctx, "merge_state")
    if no_merge is not None and entry(ctx.target, "merge_states") is None:
        return [no_merge]
    base, empty_lse = conventions(ctx.target)
    conv = _name(base, empty_lse)
    lives = [0.0, 8.0, -20.0]
    if math.isfinite(empty_lse):
        lives += [empty_lse + 2.0, empty_lse + 30.0]  # live, just above the sentinel
    cases = []
    e = empty(ctx, (T, H), DV)
    for i, mu in enumerate(lives):
        live = state(ctx.randn(T, H, DV, salt=i), mu + 0.25 * ctx.randn(T, H, salt=20 + i))
        if no_merge is None:
            cases.append(merge_case(ctx, f"{conv}: empty+live lse~{mu:g}", e, live))
            cases.append(merge_case(ctx, f"{conv}: live+empty lse~{mu:g}", live, e))
        else:
            cases.append(chain_case(ctx, f"{conv}: empty+live lse~{mu:g}", [e, live]))
    if empty_lse != -math.inf and no_merge is None:
        cases.append(merge_case(ctx, f"{conv}: empty+empty", e, empty(ctx, (T, H), DV)))
    elif empty_lse != -math.inf:
        cases.append(chain_case(ctx, f"{conv}: empty+empty", [e, empty(ctx, (T, H), DV)]))
    if entry(ctx.target, "merge_states") is not None:
        live = state(ctx.randn(T, H, DV, salt=40), 1.0 + ctx.randn(T, H, salt=41))
        cases.append(chain_case(ctx, f"{conv}: [empty, live, empty]", [e, live, empty(ctx, (T, H), DV)]))
    return cases


PROBE = Probe(
    name="merge-empty-convention",
    summary="empty states in the declared convention (-inf, +inf, sentinel; base e or 2) merge as empty",
    refs=("Dao-AILab/flash-attention#978", "flashinfer-ai/flashinfer#4401", "flashinfer-ai/flashinfer#4450",
          "vllm-project/vllm csrc/attention/merge_attn_states.cu (+-inf -> -inf)"),
    run=run,
)
