"""Run by tests/kernels/adapters/test_sage_triton.py in a child process with TRITON_INTERPRET=1: SageAttention 1.0.6's Triton
path (``sage1-triton``) on a few small cases, judged against attnum's ``sage1`` emulation; one JSON line.

argv: numerics (faithful | raw)."""

import json
import math
import sys

import torch

from attnum.attention.lowbit.sage import _prepare
from attnum.audit.harness import ProbeContext
from attnum.kernels.registry import resolve
from attnum.numerics.formats import get_format, torch_dtype
from attnum.numerics.lowbit import SAGE
from attnum.numerics.policy import parse_policy


def phantom_keys(q, k, v, block_k=64):
    """float64 prediction of the non-causal kernel at S % block_k != 0: the block_k - S % block_k keys past
    S are loaded as 0 (masked loads), so they score exactly 0 and carry V = 0 -- they add 2**(0 - m) each
    to the row sum. The scores and V are the emulation's (sage1's quantized values)."""
    score, vq, _ = _prepare(q, k, v, SAGE["sage1"], parse_policy(f"sage1:{get_format(str(q.dtype)[6:]).name}"),
                            None)
    s = score(0, k.shape[-2])
    pad = -k.shape[-2] % block_k
    m = s.amax(dim=-1, keepdim=True).clamp(min=0.0)  # the phantom keys' 0 enters the row max
    p = torch.exp2(s - m)
    return (p @ vq) / (p.sum(dim=-1, keepdim=True) + pad * torch.exp2(-m))


def main():
    numerics = sys.argv[1]
    torch.set_num_threads(1)
    target = resolve("sage1-triton", "cpu", numerics=numerics)
    if not target.available:
        print(json.dumps({"unavailable": target.reason}))
        return
    out = {"declared": target.declared}
    for dt in ("fp16", "bf16"):
        ctx = ProbeContext(target=target.fn, dtype=torch_dtype(dt), fmt=get_format(dt), emulation="sage1")
        rows = out.setdefault(dt, {})

        def qkv(n, s, h=1, g=1, d=64, salt=0, kbias=3.0):
            q = ctx.randn(1, h, n, d, salt=salt + 1)
            k = ctx.randn(1, g, s, d, salt=salt + 2) + kbias * ctx.randn(1, 1, 1, d, salt=salt + 3)
            return ctx.cast(q, k, ctx.randn(1, g, s, d, salt=salt + 4))

        def row(label, case):
            vd = case.verdict
            rows[label] = [vd.status, vd.ratio, vd.target_error, vd.bound, vd.note]

        q, k, v = qkv(128, 128)
        row("N=S=128", ctx.check("N=S=128", q, k, v))
        q, k, v = qkv(130, 130, salt=10)
        row("N=S=130 causal", ctx.check("causal", q, k, v, is_causal=True))
        q, k, v = qkv(16, 128, h=4, g=2, salt=20)
        row("GQA H=4 G=2 scale=0.3", ctx.check("gqa", q, k, v, enable_gqa=True, scale=0.3))
        q, k, v = qkv(16, 97, salt=30)
        row("N=16 S=97", ctx.check("ragged", q, k, v))
        o = target.fn(q, k, v).double()
        pred = phantom_keys(q, k, v)
        rows["S=97 vs phantom keys"] = float(((o - pred).abs() / pred.abs().amax()).max())
        q, k, v = qkv(128, 128)
        plain = ProbeContext(target=target.fn, dtype=torch_dtype(dt), fmt=get_format(dt))  # the dtype's bounds
        row("N=S=128 fp16 bounds", plain.check("bounds", q, k, v))
    print(json.dumps(out, default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else x))


if __name__ == "__main__":
    main()
