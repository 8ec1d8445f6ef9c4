"""The LSE must be in the base the target declares: natural (flash-attn, vLLM) or 2 (FlashInfer).

FlashInfer's kernels and ``merge_state*`` keep log2-scale LSEs ("convert to natural by x ln2",
flashinfer-ai/flashinfer flashinfer/trace/templates/cascade.py); flash-attn and vLLM use natural logs;
FlashMLA's sparse-prefill README says base 2 while deepseek-ai/FlashMLA tests/ref.py uses a natural
logsumexp. A state produced in one base and merged in the other weighs the states by b**(delta) with the
wrong b: every merged output is wrong while each kernel's own test passes. flashinfer-ai/flashinfer
tests/test_helpers/test_helpers.py::ref_single_prefill mixes the two (a natural row max inside a base-2
LSE) and its only user hides it behind a 1e-2 tolerance.
Merge targets: states whose LSEs differ by 1, 3 and 10 in the declared base, O = +1 vs -1 so the weights
show directly. Decode targets: the returned LSE against golden in the declared base.
"""

from __future__ import annotations

import torch

from attnum.audit.harness import Case, Probe, ProbeContext
from attnum.audit.serving import decode_case, decode_inputs, merge_case, missing_both, state

T, H, DV = 4, 2, 16
GAPS = (1.0, 3.0, 10.0)


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    no_merge, no_decode, neither = missing_both(ctx)
    if neither:
        return [neither]
    if no_merge is None:
        ones = torch.ones(T, H, DV, dtype=torch.float64)
        for gap in GAPS:
            base = 0.5 * ctx.randn(T, H, salt=int(gap))
            cases.append(merge_case(ctx, f"lse_a - lse_b = {gap:g}", state(ones, base + gap), state(-ones, base)))
    if no_decode is None:
        for N in (1, 2):  # N = 1: single-query decode
            q, k, v, lens = decode_inputs(ctx, B=2, H=4, G=2, N=N, S=200, d=64, lens=(200, 77), salt=3 + N)
            cases.append(decode_case(ctx, f"decode N={N} lse", q, k, v, cache_seqlens=lens, check_lse=True))
            cases.append(decode_case(ctx, f"decode N={N} lse splits=3", q, k, v, cache_seqlens=lens,
                                     num_splits=3, check_lse=True))
    return cases


PROBE = Probe(
    name="lse-base",
    summary="merged weights and returned LSE in the declared base (e or 2): LSE gaps 1, 3, 10",
    refs=("flashinfer-ai/flashinfer flashinfer/trace/templates/cascade.py", "deepseek-ai/FlashMLA tests/ref.py",
          "flashinfer-ai/flashinfer tests/test_helpers/test_helpers.py::ref_single_prefill"),
    run=run,
)
