"""SageAttention1's real Triton kernels, run on CPU by Triton's interpreter, against attnum's ``sage1`` emulation.

Fetches the ``sageattention==1.0.6`` wheel (``pip download --no-deps``, attnum.kernels.wheels.source) into
``~/.cache/attnum`` (outside the repository; nothing of it is committed), imports its
``quant_per_block.per_block_int8`` and
``attn_qk_int8_per_block.forward`` with ``TRITON_INTERPRET=1``, and compares on one input with a channel
bias in K (smoothed as ``sageattn`` does: ``k - k.mean(dim=seq)`` in fp16):

- the INT8 Q and K values and their scales: bit for bit against :func:`attnum.attention.lowbit.sage_quant.quantize_groups`;
- the output: against ``sage1:fp16`` (fp16 MMA accumulator every 16 products) and ``sage1:fp16,pv_acc=fp32``,
  and both against the float64 golden value. Triton's raw interpreter evaluates ``tl.dot(p, v,
  out_dtype=fp16)`` with numpy, not with a tensor core's accumulator, so the output is compared, not required
  to be equal.

    python benchmarks/check_sage_triton.py [--seq-len 256]

attnum's audit of the same kernels under the faithful Triton model: ``attnum audit sage1-triton`` (docs/lowbit.md).
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--head-dim", type=int, default=64)
    args = ap.parse_args()
    os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from attnum.kernels.wheels import source as wheels

    wheels.fetch("sageattention")  # the pinned wheel, once, into $ATTNUM_CACHE (attnum kernels fetch sageattention)
    forward = wheels.load("sageattention", "sageattention.attn_qk_int8_per_block").forward
    per_block_int8 = wheels.load("sageattention", "sageattention.quant_per_block").per_block_int8

    from attnum.attention import flash_attention, golden_attention
    from attnum.attention.lowbit.sage_quant import LOG2E32, f32, quantize_groups, smooth_k
    from attnum.numerics.lowbit import SAGE

    N, d = args.seq_len, args.head_dim
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, N, d, generator=g) for _ in range(3))
    q16, k16, v16 = q.half(), (k + 3 * torch.randn(d, generator=g)).half(), v.half()
    ks = k16 - k16.mean(dim=2, keepdim=True)
    q8, qs, k8, kscl = per_block_int8(q16, ks)
    out = forward(q8, k8, v16, qs, kscl, output_dtype=torch.float16)
    o = (out[0] if isinstance(out, tuple) else out).double()

    lb = SAGE["sage1"]
    qx = f32(q16.double() * float(f32(torch.tensor(d**-0.5 * LOG2E32, dtype=torch.float64))))
    qv, qsc = quantize_groups(qx, lb, "q", "int8")
    kk = smooth_k(k16.double(), "fp16")
    kv, ksc = quantize_groups(kk, lb, "k", "int8")
    same = {"smoothed K": torch.equal(kk, ks.double()), "INT8 Q": torch.equal(qv, q8.double()),
            "INT8 K": torch.equal(kv, k8.double()),
            "Q scales": torch.equal(qsc[..., ::lb.block_q, 0].flatten(), qs.double().flatten()),
            "K scales": torch.equal(ksc[..., ::lb.block_k, 0].flatten(), kscl.double().flatten())}
    for name, ok in same.items():
        print(f"{name:11s} bit for bit: {ok}")
    gold = golden_attention(q16.double(), k16.double(), v16.double())
    print(f"kernel (interpreted) RMSE vs float64: {float((o - gold).pow(2).mean().sqrt()):.4e}")
    for pol in ("sage1:fp16", "sage1:fp16,pv_acc=fp32"):
        e = flash_attention(q16.double(), k16.double(), v16.double(), policy=pol).double()
        print(f"{pol:24s} RMSE vs float64 {float((e - gold).pow(2).mean().sqrt()):.4e}; vs kernel: max "
              f"{float((o - e).abs().max()):.3e}, equal {100 * float((o == e).double().mean()):.1f}%")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
