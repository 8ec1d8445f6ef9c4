"""FlashInfer's Triton merges (flashinfer-ai/flashinfer#4051): two empty states merge to NaN; a live state whose
base-2 LSE is at or below -5e4 is lost.

Runs on CPU in Triton's interpreter. Needs torch and triton, and FlashInfer's kernel file (it imports only
triton): ``pip download flashinfer-python==0.7.4 --no-deps`` and unzip it, then

    python flashinfer-triton-merge-state-two-empty-nan.py path/to/flashinfer/triton/kernels/cascade.py

(without a path it imports ``flashinfer.triton.kernels.cascade`` from an installed flashinfer). The host
wrappers in ``flashinfer/triton/cascade.py`` assert a CUDA device, so the kernels are launched here exactly as
they launch them. Prints what the kernel returns beside the right value (a float64 merge).
"""

import importlib
import importlib.util
import math
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the interpreter runs on CPU

import torch  # noqa: E402


def kernels():
    if len(sys.argv) > 1:
        spec = importlib.util.spec_from_file_location("fi_cascade_kernels", sys.argv[1])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module("flashinfer.triton.kernels.cascade")


def merge_state(mod, v_a, s_a, v_b, s_b):
    """flashinfer.triton.cascade.merge_state's launch, without its CUDA checks."""
    seq_len, num_heads, head_dim = v_a.shape
    v_merged = torch.empty_like(v_a)
    s_merged = torch.empty(seq_len, num_heads)
    mod.merge_state_kernel[(seq_len,)](v_a, s_a.float(), v_b, s_b.float(), v_merged, s_merged, num_heads, head_dim,
                                       bdx=head_dim, bdy=num_heads)
    return v_merged, s_merged


def merge_states(mod, v, s):
    """flashinfer.triton.cascade.merge_states' launch, without its CUDA checks."""
    seq_len, n, num_heads, head_dim = v.shape
    v_merged = torch.empty(seq_len, num_heads, head_dim, dtype=v.dtype)
    s_merged = torch.empty(seq_len, num_heads)
    mod.merge_states_kernel[(seq_len,)](v, s.float(), v_merged, s_merged, n, num_heads, head_dim, bdx=head_dim,
                                        bdy=num_heads)
    return v_merged, s_merged


def right(v, s):
    """The merge in float64, base 2: states (n, ...) -> (v, s); no live state -> (0, -inf)."""
    s = s.double()
    m = s.max(0).values
    if math.isinf(float(m.max())) and float(m.max()) < 0:
        return torch.zeros_like(v[0]).double(), m
    w = torch.exp2(s - m)
    return (w[..., None] * v.double()).sum(0) / w.sum(0)[..., None], m + torch.log2(w.sum(0))


def main():
    mod = kernels()
    inf = math.inf
    print("merge_state(v_a, s_a, v_b, s_b), one position, one head, head_dim 4, base-2 LSEs")
    v_a, v_b = torch.zeros(1, 1, 4), torch.zeros(1, 1, 4)
    s_a = s_b = torch.full((1, 1), -inf)
    got_v, got_s = merge_state(mod, v_a, s_a, v_b, s_b)
    want_v, want_s = right(torch.stack([v_a, v_b]), torch.stack([s_a, s_b]))
    print(f"  two empty states (s_a = s_b = -inf): v = {got_v.flatten().tolist()}  s = {got_s.item()}")
    print(f"                               right: v = {want_v.flatten().tolist()}  s = {want_s.item()}")
    print("merge_states(v, s) of one live state, v = 1 (its o, normalised), s = its base-2 LSE")
    for lse in (-6e4, -5e4):
        v, s = torch.ones(1, 1, 1, 1), torch.full((1, 1, 1), lse)
        got_v, got_s = merge_states(mod, v, s)
        want_v, want_s = right(v.transpose(0, 1), s.transpose(0, 1))
        print(f"  s = {lse:g}: v = {got_v.item():g}  s = {got_s.item():g}    right: v = {want_v.item():g}  "
              f"s = {want_s.item():g}")


if __name__ == "__main__":
    main()
