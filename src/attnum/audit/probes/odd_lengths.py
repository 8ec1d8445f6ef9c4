"""Lengths that are not tile multiples: 1, 2, 63, 65, 129, 1000.

Models the tail-tile bugs of Dao-AILab/flash-attention ``test_flash_attn_bwd_overflow`` ("not masking
elements beyond seqlen_k caused NaN ... when seqlen % 128 != 0"), pytorch/pytorch#196678
(seq_len % 128 == 64) and NVIDIA/cudnn-frontend#160 (small non-multiple lengths); flashinfer's
#4401 regression sweep uses kv_len 1, 2, 63, 64, 65, 129.
Q and K are scaled up (5x, 3x as in flash-attn's test) so unmasked tail garbage would show.
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext

LENGTHS = (1, 2, 63, 65, 129, 1000)
H, D = 2, 64


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    for n in LENGTHS:
        q, k, v = ctx.cast(5 * ctx.randn(1, H, n, D, salt=n), 3 * ctx.randn(1, H, n, D, salt=n + 1),
                           ctx.randn(1, H, n, D, salt=n + 2))
        cases.append(ctx.check(f"N=S={n}", q, k, v))
        cases.append(ctx.check(f"N=S={n} causal", q, k, v, is_causal=True))
    return cases


PROBE = Probe(
    name="odd-lengths",
    summary="N = S in 1, 2, 63, 65, 129, 1000, causal and not",
    refs=("Dao-AILab/flash-attention tests/test_flash_attn.py::test_flash_attn_bwd_overflow",
          "pytorch/pytorch#196678", "flashinfer-ai/flashinfer#4401"),
    run=run,
)
