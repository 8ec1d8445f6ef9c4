"""SageAttention 1.0.6, non-causal: the keys past kv_len in the last 64-key tile are scored 0, not masked.

The non-causal kernel (``attn_qk_int8_per_block.py``) loads the last K tile with ``mask=k_mask`` and no
``other`` (so 0) and never sets those scores to -inf: up to 63 phantom keys of score 0 and value 0 join every
row's softmax. Runs on CPU in Triton's interpreter. Needs torch and triton, and SageAttention's two kernel
files (they import only torch and triton): ``pip download sageattention==1.0.6 --no-deps`` and unzip it, then

    python sageattention-noncausal-ragged-tail.py path/to/sageattention/

(without a path it imports them from an installed sageattention). ``sageattn`` asserts CUDA tensors, so its
host code (``tensor_layout="HND"``, ``smooth_k=True``: K minus its mean over the sequence, which changes no
softmax) is repeated here, out of place. Prints the kernel's output beside the right one (float64 softmax).
"""

import importlib
import importlib.util
import math
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the interpreter runs on CPU

import torch  # noqa: E402


def module(name):
    if len(sys.argv) > 1:
        spec = importlib.util.spec_from_file_location(f"sage_{name}", os.path.join(sys.argv[1], f"{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(f"sageattention.{name}")


def sageattn(q, k, v):
    """core.sageattn(q, k, v, tensor_layout="HND", is_causal=False) for fp16 inputs, without its CUDA assert."""
    k = k - k.mean(dim=2, keepdim=True)
    q8, qs, k8, ks = module("quant_per_block").per_block_int8(q.contiguous(), k.contiguous())
    return module("attn_qk_int8_per_block").forward(q8, k8, v.contiguous(), qs, ks, tensor_layout="HND",
                                                   output_dtype=q.dtype)


def right(q, k, v):
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v.double()


def main():
    g = torch.Generator().manual_seed(0)
    print("sageattn, non-causal, q (1, 1, 70, 64), k and v (1, 1, kv_len, 64), fp16")
    for kv_len in (5, 64, 65, 100, 128):
        q = torch.randn(1, 1, 70, 64, generator=g).half()
        k = torch.randn(1, 1, kv_len, 64, generator=g).half()
        ones = torch.ones(1, 1, kv_len, 64, dtype=torch.float16)
        v = torch.randn(1, 1, kv_len, 64, generator=g).half()
        o1, o = sageattn(q, k, ones), sageattn(q, k, v)
        err = (o.double() - right(q, k, v)).abs().max().item()
        last = kv_len - 64 * ((kv_len - 1) // 64)  # keys in the last 64-key tile
        print(f"  kv_len {kv_len:3d} (last tile {last:2d} of 64 keys): V = 1 everywhere -> output "
              f"{o1.double().mean().item():.4f} (right: 1.0000); random V: max error {err:.3g}")


if __name__ == "__main__":
    main()
