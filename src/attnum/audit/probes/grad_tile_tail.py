"""Backward at lengths that leave a ragged last tile (1, 2, 5, 17; 64, 192 = 64 mod 128) and at exact
multiples of 128 (128, 256), where backward kernels take their unmasked "even" path.

Models flash-attn's ``test_flash_attn_bwd_overflow`` ("not masking elements beyond seqlen_k caused
NaN in dQ ... when seqlen % 128 != 0"; q ~ 5 N(0,1), k, v ~ 3 N(0,1)), pytorch/pytorch#196678
(seq_len % 128 == 64) and NVIDIA/cudnn-frontend#160.
"""

from __future__ import annotations

from attnum.audit.harness import Case, Probe, ProbeContext

LENGTHS = (1, 2, 5, 17, 64, 192, 128, 256)
D = 32


def run(ctx: ProbeContext) -> list[Case]:
    cases = []
    for n in LENGTHS:
        q, k, v = ctx.cast(5 * ctx.randn(1, 2, n, D, salt=n), 3 * ctx.randn(1, 2, n, D, salt=n + 1),
                           3 * ctx.randn(1, 2, n, D, salt=n + 2))
        for causal in (False, True):
            cases.append(ctx.check_grad(f"N=S={n} causal={causal}", q, k, v, is_causal=causal))
    return cases


PROBE = Probe(
    name="grad-tile-tail",
    summary="backward at N = S in 1, 2, 5, 17, 64, 192, 128, 256 with large q/k",
    refs=("Dao-AILab/flash-attention tests/test_flash_attn.py::test_flash_attn_bwd_overflow",
          "pytorch/pytorch#196678", "NVIDIA/cudnn-frontend#160"),
    run=run,
    kind="backward",
)
