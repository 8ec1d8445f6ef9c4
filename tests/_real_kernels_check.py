"""Run by tests/kernels/adapters/test_real_kernels.py in a child process with TRITON_INTERPRET=1: a lean audit of SGLang's
and vLLM's Triton kernels (a few small cases per kernel and dtype), printed as one JSON line.

argv: numerics (faithful | raw), then the targets to run."""

import json
import math
import sys

import torch

from attnum.attention.serving.paged import to_pages
from attnum.audit.harness import ProbeContext
from attnum.audit.probes import PROBES
from attnum.audit.serving import decode_case, decode_inputs
from attnum.kernels.registry import resolve
from attnum.numerics.formats import get_format, torch_dtype


def ragged(ctx, numerics, lens=(40, 17, 1)):
    """sglang-context on sequences of lengths ``lens`` packed in one call (b_start_loc = cumulative lengths),
    each sequence's rows judged on their own (outside the SDPA protocol, which has one N)."""
    from attnum.kernels.adapters import sglang as sglang_triton
    from attnum.kernels.triton import interp as triton_interp

    seqs = [ctx.cast(ctx.randn(1, 4, L, 64, salt=10 + i), ctx.randn(1, 2, L, 64, salt=20 + i),
                     ctx.randn(1, 2, L, 64, salt=30 + i)) for i, L in enumerate(lens)]
    outs = triton_interp.under(sglang_triton.context_varlen, numerics)(*zip(*seqs), is_causal=True)
    return [ctx.check(f"packed lengths {lens}: L={L} causal", q, k, v, is_causal=True, enable_gqa=True,
                      out=o.detach().double()) for L, (q, k, v), o in zip(lens, seqs, outs, strict=True)]


def cases(name, ctx, numerics="faithful"):
    if name.endswith(":SGLangDecode"):
        name = "sglang-decode"
    if name.endswith("merge"):
        return PROBES["merge-two-empty"].run(ctx)
    out = []
    if name == "sglang-context":  # plain prefill: N = S; and ragged lengths packed by b_start_loc
        q, k, v = ctx.cast(ctx.randn(2, 4, 40, 64, salt=1), ctx.randn(2, 2, 40, 64, salt=2),
                           ctx.randn(2, 2, 40, 64, salt=3))
        return [ctx.check("prefill N=S=40 causal", q, k, v, is_causal=True, enable_gqa=True), *ragged(ctx, numerics)]
    if name == "vllm-prefix-prefill":  # 4 queries over a paged prefix, NaN past the pages, vLLM's layout
        q, k, v, lens = decode_inputs(ctx, B=2, H=4, G=2, N=4, S=64, d=64, lens=(48, 37), salt=7)
        kp, table = to_pages(k, 16, cache_seqlens=lens, spare_pages=1, fill=math.nan, seed=16)
        vp, _ = to_pages(v, 16, cache_seqlens=lens, spare_pages=1, fill=math.nan, seed=16)
        out.append(decode_case(ctx, "paged decode N=4 L=(48, 37) P=16", q, k, v, cache_seqlens=lens,
                               block_table=table, pages=(kp, vp)))
    if name in ("vllm-unified", "sglang-extend", "vllm-prefix-prefill"):
        q, k, v = ctx.cast(ctx.randn(1, 4, 16, 64, salt=1), ctx.randn(1, 2, 40, 64, salt=2),
                           ctx.randn(1, 2, 40, 64, salt=3))
        out.append(ctx.check("prefill N=16 S=40 causal", q, k, v, is_causal=True, enable_gqa=True))
        if name in ("sglang-extend", "vllm-prefix-prefill"):
            return out
    if name == "vllm-unified":  # N > 1 queries per sequence: its (B, H, N, d) ``out`` is a copy token-major
        q, k, v, lens = decode_inputs(ctx, B=3, H=4, G=2, N=4, S=40, d=32, lens=(37, 5, 4), salt=9)
        out.append(decode_case(ctx, "decode N=4 L=(37, 5, 4) causal", q, k, v, cache_seqlens=lens, is_causal=True))
    q, k, v, lens = decode_inputs(ctx, B=2, H=4, G=2, N=1, S=64, d=64, lens=(64, 17), salt=5)
    out.append(decode_case(ctx, "decode N=1 L=(64, 17) splits=2", q, k, v, cache_seqlens=lens, num_splits=2,
                           check_lse=name == "vllm-triton-decode"))
    return out


def main():
    numerics, names = sys.argv[1], sys.argv[2:]
    torch.set_num_threads(1)
    if any(n.startswith("triton-interpret:") for n in names):  # the example adapter imports sglang's module
        from attnum.kernels.wheels import source as wheels

        wheels.load("sglang", "sglang.srt.layers.attention.triton_ops.decode_attention")
    result = {}
    for name in names:
        target = resolve(name, "cpu", numerics=numerics)
        if not target.available:
            result[name] = {"unavailable": target.reason}
            continue
        conv = target.declared
        for dt in ("fp16", "bf16", "fp32"):
            ctx = ProbeContext(target=target.fn, dtype=torch_dtype(dt), fmt=get_format(dt),
                               causal_alignment=conv.get("causal_alignment", "top_left"),
                               empty_rows=conv.get("empty_rows", "zeros"))
            result.setdefault(name, {})[dt] = [(c.label, c.verdict.status, c.verdict.ratio, c.verdict.note)
                                               for c in cases(name, ctx, numerics)]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
