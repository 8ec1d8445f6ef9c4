"""Print the Policy field list of docs/core-api.md, generated from the dataclass.

``python scripts/policy_fields.py`` prints the block that sits between ``<!-- policy-fields:start -->``
and ``<!-- policy-fields:end -->`` in docs/core-api.md; ``tests/project/test_docs.py`` checks that the two agree,
and that every field of ``attnum.numerics.policy.Policy`` has a description here.
"""

from __future__ import annotations

import dataclasses

# What each field means; a field added to Policy without a line here fails the docs check.
DESCRIPTIONS = {
    "inputs": "Q, K, V as loaded (rounded once, from their own values)",
    "scores": "S = scale · QKᵀ (and S + an additive mask)",
    "exp": "P = exp(S − m) as summed into l",
    "probs": "P (flash) or P/l (baseline) as fed to the P·V matmul",
    "row_sum": "l, per tile and running",
    "rescale": "α = exp(m_old − m_new), the online-softmax correction",
    "acc": "the output accumulator O and each tile's P·V",
    "out": "the final output",
    "lse": "m + log l as stored for the backward; None means row_sum's format",
    "matmul_acc": "the matmuls' accumulator format; None = exact (float64, rounded once)",
    "reduction_chunk": "products summed exactly before each rounding into a non-native matmul_acc",
    "normalize": "how O is normalised: 'divide' (O / l) or 'reciprocal' (O · (1/l), as FA2)",
    "max_shift": "'none' or 'qiu-yao' (the biased-rounding fix: no P entry equals 1)",
    "exp2": "'native' (the carrier's exp) or 'polyN', N = 1..5 (FA4's software exp2: Cody-Waite reduction and a "
            "degree-N polynomial on fp32 FMAs)",
    "rescale_threshold": "None (rescale whenever the row maximum grows) or T > 0: FA4's lazy rescaling, the running "
                         "maximum kept until it grows by more than T (log2 units), corrected at the end",
    "mma": "None, or a GPU architecture (sm80, sm90, hopper, ...): the matmul sites as its tensor-core "
           "instructions (attnum.mma; flash's P·V onto O inside the MMA)",
    "mma_chain": "with mma and an fp32 acc: on (O is the P·V instructions' accumulator, FA2/FA3's and Triton's "
                 "tl.dot(p, v, acc)) or off (each tile's P·V from a zero accumulator, then added at acc)",
    "acc_update": "each (O rounded at acc three times per tile) or once (O·alpha + P·V formed in fp32, rounded at "
                  "acc once: an accumulator kept in the output format; fa2 only)",
    "lowbit": "None, or a SageAttention scheme (attnum.numerics.lowbit.LowBit: INT8/INT4/FP8/NVFP4 quantizers, smoothing, "
              "P·V format and accumulator) that flash and baseline then run",
    "name": "the policy's display name (not compared)",
}


def block() -> str:
    from attnum.numerics.policy import Policy

    lines = []
    for f in dataclasses.fields(Policy):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        default = "" if f.default is dataclasses.MISSING else f" = {f.default!r}"
        lines.append(f"- `{f.name}: {kind}{default}` — {DESCRIPTIONS.get(f.name, 'UNDOCUMENTED')}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(block())
