"""SGLang's Triton ``merge_state_triton``: two empty states (LSE -inf, or FA2's +inf, which it maps to -inf
itself) merge to NaN in the output and its LSE.

Runs on CPU in Triton's interpreter. Needs torch and triton, and SGLang's kernel file (it imports only torch
and triton): ``pip download sglang==0.5.3 --no-deps`` and unzip it (the file is
``sglang/srt/layers/attention/triton_ops/merge_state.py`` up to 0.5.15,
``sglang/kernels/ops/attention/merge_state.py`` from 0.5.16; byte-identical through 0.5.23), then

    python sglang-triton-merge-state-two-empty-nan.py path/to/merge_state.py

(without a path it imports it from an installed sglang). Prints what the kernel returns beside the right value.
"""

import importlib
import importlib.util
import math
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the interpreter runs on CPU

import torch  # noqa: E402

MODULES = ("sglang.kernels.ops.attention.merge_state", "sglang.srt.layers.attention.triton_ops.merge_state")


def kernel():
    if len(sys.argv) > 1:
        spec = importlib.util.spec_from_file_location("sglang_merge_state", sys.argv[1])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.merge_state_triton
    for name in MODULES:
        try:
            return importlib.import_module(name).merge_state_triton
        except ImportError:
            continue
    sys.exit(f"give the path of merge_state.py (none of {MODULES} imports here)")


def main():
    merge = kernel()
    print("merge_state_triton(prefix_o, prefix_lse, suffix_o, suffix_lse): 1 token, 1 head, head size 4, natural log")
    for dtype in (torch.float32, torch.bfloat16):
        for empty in (-math.inf, math.inf):
            o_a, o_b = torch.zeros(1, 1, 4, dtype=dtype), torch.zeros(1, 1, 4, dtype=dtype)
            lse = torch.full((1, 1), empty)
            o, o_lse = merge(o_a, lse, o_b, lse.clone())
            print(f"  {str(dtype):15s} both LSEs {empty}: o = {o.float().flatten().tolist()}  lse = {o_lse.item()}"
                  f"    right: o = [0.0, 0.0, 0.0, 0.0]  lse = -inf")
    o_a, o_b = torch.ones(1, 1, 4), torch.zeros(1, 1, 4)
    o, o_lse = merge(o_a, torch.zeros(1, 1), o_b, torch.full((1, 1), -math.inf))
    print(f"  one live state (lse 0, o = 1) and one empty: o = {o.flatten().tolist()}  lse = {o_lse.item()}"
          "    right: o = [1.0, 1.0, 1.0, 1.0]  lse = 0.0")


if __name__ == "__main__":
    main()
