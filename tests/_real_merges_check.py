"""Run by tests/kernels/adapters/test_real_merges.py in a child process with TRITON_INTERPRET=1: FlashInfer's Triton merges and
ring-flash-attn's merge on small states (T = 2 positions, 2 heads, dv = 4: FlashInfer's kernels loop over
every element as scalars, ~30 ms each in the interpreter), fp16, bf16, fp32, printed as one JSON line.

argv: numerics (faithful | raw), then the targets to run."""

import json
import math
import sys

import torch

from attnum.audit.harness import ProbeContext
from attnum.audit.merge_cases import chain_case, empty
from attnum.audit.serving import merge_case, state
from attnum.kernels.registry import resolve
from attnum.kernels.serving import conventions
from attnum.numerics.formats import get_format, torch_dtype

T, H, DV = 2, 2, 4


def cases(ctx):
    base, _ = conventions(ctx.target)
    big = -6e4 if base == 2 else -6e4 / math.log2(math.e)  # below FlashInfer's -5e4 (base 2) sentinel

    def live(i, mu):
        return state(ctx.randn(T, H, DV, salt=i), mu + ctx.randn(T, H, salt=50 + i))

    e = empty(ctx, (T, H), DV)
    return [merge_case(ctx, "two live", live(1, 0.0), live(2, 1.0)),
            merge_case(ctx, "two empty", e, empty(ctx, (T, H), DV)),
            merge_case(ctx, "empty + live lse~-6e4 base 2", e, live(3, big)),
            chain_case(ctx, "[empty, live, live]", [e, live(4, 0.0), live(5, 2.0)])]


def main():
    numerics, names = sys.argv[1], sys.argv[2:]
    torch.set_num_threads(1)
    result = {}
    for name in names:
        target = resolve(name, "cpu", numerics=numerics)
        if not target.available:
            result[name] = {"unavailable": target.reason}
            continue
        for dt in ("fp16", "bf16", "fp32"):
            ctx = ProbeContext(target=target.fn, dtype=torch_dtype(dt), fmt=get_format(dt))
            result.setdefault(name, {})[dt] = {c.label.split(" (")[0]: (c.verdict.status, c.verdict.note)
                                               for c in cases(ctx)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
