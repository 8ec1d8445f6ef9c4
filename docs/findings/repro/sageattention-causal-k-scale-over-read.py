"""SageAttention 1.0.6, causal: the diagonal stage reads K_scale one element past its end.

The causal kernel (``attn_qk_int8_per_block_causal.py``) walks its diagonal stage over the whole 128-query
block in 64-key steps and loads ``k_scale = tl.load(K_scale_ptr)`` with no mask. When S % 128 is 1 to 64, the
last query block's second step is a key block that does not exist: its K tile is masked off (0), but its scale
is read from one element past the end of the head's scales -- the next head's first scale, or, for the last
head, the 4 bytes after the tensor. ``0 * k_scale`` is 0 for any finite value there; an inf or NaN there makes
the row NaN. Runs on CPU in Triton's interpreter. Needs torch and triton, and SageAttention's two kernel files
(they import only torch and triton): ``pip download sageattention==1.0.6 --no-deps`` and unzip it, then

    python sageattention-causal-k-scale-over-read.py path/to/sageattention/

(without a path it imports them from an installed sageattention). ``sageattn`` asserts CUDA tensors, so its
host code (``tensor_layout="HND"``, ``is_causal=True``, ``smooth_k=True``) is repeated here, out of place. To
make the over-read deterministic, K_scale is handed to the kernel as a view of a buffer one element longer,
whose last element -- the one the kernel reads past the end -- is set to 0.0, 1.0, inf or NaN (what the memory after
a GPU allocation may hold); the kernel is told only the view.
"""

import importlib
import importlib.util
import math
import os
import sys
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the interpreter runs on CPU

import torch  # noqa: E402

# numpy, under the interpreter, warns at 0 * inf and 0 * NaN: the values printed below are the point
warnings.filterwarnings("ignore", category=RuntimeWarning)


def module(name):
    if len(sys.argv) > 1:
        spec = importlib.util.spec_from_file_location(f"sage_{name}", os.path.join(sys.argv[1], f"{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(f"sageattention.{name}")


def quantize(q, k):
    """core.sageattn's host code for fp16 inputs, HND, is_causal=True: smooth K, INT8 per block."""
    k = k - k.mean(dim=2, keepdim=True)
    return module("quant_per_block").per_block_int8(q.contiguous(), k.contiguous())


def causal(q8, k8, v, qs, ks):
    return module("attn_qk_int8_per_block_causal").forward(q8, k8, v.contiguous(), qs, ks, tensor_layout="HND",
                                                          output_dtype=torch.float16)


def with_tail(ks, tail):
    """ks (B, H, S/64, 1) as a view of a buffer whose element right after the view holds ``tail``."""
    buf = torch.empty(ks.numel() + 1, dtype=ks.dtype)
    buf[:-1] = ks.reshape(-1)
    buf[-1] = tail
    return buf[:-1].view(ks.shape)


def right(q, k, v):
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    n = q.shape[2]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double()


def nan_rows(o):
    """'head h rows a..b' for each head with NaN rows (o is (1, H, N, d))."""
    spans = []
    for h in range(o.shape[1]):
        rows = o[0, h].isnan().any(dim=-1).nonzero().flatten().tolist()
        if rows:
            spans.append(f"head {h} rows {rows[0]}..{rows[-1]}" if rows == list(range(rows[0], rows[-1] + 1))
                         else f"head {h} rows {rows}")
    return ", ".join(spans) or "none"


def fmt(x):
    return "[" + ", ".join(f"{float(t):.4f}" for t in x) + "]"


def main():
    g = torch.Generator().manual_seed(0)
    print("sageattn, causal, q, k, v (1, 2, S, 64) fp16; K_scale (1, 2, ceil(S/64), 1) float32, "
          "the element after it set to 0.0, 1.0, inf, NaN")
    for S in (64, 150, 200):
        q, k, v = (torch.randn(1, 2, S, 64, generator=g).half() for _ in range(3))
        q8, qs, k8, ks = quantize(q, k)
        outs = {tail: causal(q8, k8, v, qs, with_tail(ks, float(tail))) for tail in ("0.0", "1.0", "inf", "nan")}
        reads = "reads one past the end" if (S - 1) % 128 < 64 else "stays inside"
        print(f"  S = {S:3d} (S % 128 = {S % 128:2d}: the last query block's diagonal stage {reads})")
        for tail, o in list(outs.items())[1:]:
            same = "bitwise equal to" if torch.equal(o, outs["0.0"]) else "differs from"
            print(f"    {tail:>3} after K_scale: NaN in {nan_rows(o)}; {same} the output with 0.0 there")
        gold = right(q, k, v)
        print(f"    o[0, 1, {S - 1}, :4] with NaN after: {fmt(outs['nan'][0, 1, S - 1, :4])}")
        print(f"    o[0, 1, {S - 1}, :4] with 1.0 after: {fmt(outs['1.0'][0, 1, S - 1, :4])}, float64 "
              f"{fmt(gold[0, 1, S - 1, :4])} (max |o - float64| over all rows: "
              f"{(outs['1.0'].double() - gold).abs().max().item():.3g})")

if __name__ == "__main__":
    main()
