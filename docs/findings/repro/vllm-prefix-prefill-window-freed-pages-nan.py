"""vLLM's Triton ``prefix_prefill.context_attention_fwd`` with a sliding window: the KV pages before the
window (the ones vLLM's sliding-window manager frees and points at its null block) are still loaded, their
scores masked, and their V multiplied by P = 0: a NaN there -- in freed or never-written memory -- becomes NaN
in every output row. vLLM PR #30887 (0.14) fixed the same read in the unified attention kernel; the prefix
kernel keeps it (its context loop starts at key 0 for every query block). vllm-project/vllm PR #53628 (open)
and PR #49588 (open) propose fixes; PR #53628's discussion adds that a freed token in the first retained tile
(not a whole page) reaches the output the same way.

Runs on CPU in Triton's interpreter. Needs torch and triton, and vLLM's kernel files:
``pip download vllm==0.33.0 --no-deps`` and unzip it (0.34.0 has the same lines), then

    python vllm-prefix-prefill-window-freed-pages-nan.py path/to/unzipped/wheel

(the folder holding ``vllm/``). The kernel files import a few small vLLM modules (the platform probe, the
logger, the Triton re-export, ``KVQuantMode``); this script stands in for them with an NVIDIA sm90 platform and
loads only ``prefix_prefill.py`` (and, as the control, ``triton_attention_helpers.py`` and
``triton_unified_attention.py``). With vLLM installed and no path, it imports the real ones. Prints the kernel's
output beside the right one (float64 attention over the window).
"""

import enum
import importlib
import importlib.util
import logging
import math
import os
import sys
import types

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the interpreter runs on CPU

import torch  # noqa: E402

OPS = "vllm/v1/attention/ops"


def _stub(name, **attrs):
    mod = sys.modules.get(name) or types.ModuleType(name)
    mod.__path__ = []
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def vllm_ops(root, *names):
    """vLLM's kernel files ``names`` from the unzipped wheel at ``root``, with stand-ins for what they import."""
    import triton
    import triton.language as tl

    class Platform:  # an NVIDIA sm90 GPU
        def is_rocm(self):
            return False

        def is_cuda(self):
            return True

        def is_xpu(self):
            return False

        def has_device_capability(self, cap):
            return 90 >= (cap if isinstance(cap, int) else cap[0] * 10 + cap[1])

        def get_device_capability(self):
            return (9, 0)

        def is_device_capability_family(self, cap):
            return cap // 10 == 9

        def fp8_dtype(self):
            return torch.float8_e4m3fn

    for pkg in ("vllm", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.ops"):
        _stub(pkg)
    _stub("vllm.triton_utils", triton=triton, tl=tl)
    _stub("vllm.platforms", current_platform=Platform())
    _stub("vllm.logger", init_logger=logging.getLogger)
    _stub("vllm.envs", VLLM_BATCH_INVARIANT=False)
    out = []
    for name in names:
        full = "vllm.v1.attention.ops." + name
        spec = importlib.util.spec_from_file_location(full, os.path.join(root, OPS, name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
        out.append(mod)
    return out


def kernels():
    """(context_attention_fwd, unified_attention)."""
    names = ("prefix_prefill", "triton_attention_helpers", "triton_unified_attention")
    if len(sys.argv) > 1:
        class KVQuantMode(enum.IntEnum):
            NONE = 0
            FP8_PER_TENSOR = 1
            INT8_PER_TOKEN_HEAD = 2
            FP8_PER_TOKEN_HEAD = 3
            INT4_PER_TOKEN_HEAD = 4
            NVFP4 = 5

        _stub("vllm.v1.kv_cache_interface", KVQuantMode=KVQuantMode)
        prefix, _, unified = vllm_ops(sys.argv[1], *names)
    else:
        prefix, unified = (importlib.import_module("vllm.v1.attention.ops." + n) for n in (names[0], names[2]))
    return prefix.context_attention_fwd, unified.unified_attention


L, N, P, W, D = 64, 16, 16, 16, 64  # sequence length, new tokens (the last N), page size, window, head dim


def inputs(poison):
    """q (N, 1, D); the cache as pages (L / P, P, 1, D), page i holding keys i P .. i P + P - 1; ``poison``: the
    keys holding NaN in K and V (freed memory before the window)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(N, 1, D, generator=g).half()
    k, v = torch.randn(L, 1, D, generator=g).half(), torch.randn(L, 1, D, generator=g).half()
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[poison], v_nan[poison] = math.nan, math.nan
    return q, k, v, k_nan, v_nan


def prefix_prefill(fwd, q, k, v):
    """context_attention_fwd on one sequence: L - N cached tokens (paged, vLLM's layout) and N new ones."""
    x = 16 // k.element_size()
    pages_k = k.reshape(L // P, P, 1, D // x, x).permute(0, 2, 3, 1, 4).contiguous()  # [blocks, G, D / x, P, x]
    pages_v = v.reshape(L // P, P, 1, D).permute(0, 2, 3, 1).contiguous()  # [blocks, G, D, P]
    out = torch.empty(N, 1, D, dtype=q.dtype)
    one = torch.ones(())
    fwd(q, k[L - N:].contiguous(), v[L - N:].contiguous(), out, "auto", pages_k, pages_v,
        torch.arange(L // P, dtype=torch.int32)[None], torch.tensor([0, N], dtype=torch.int32),
        torch.tensor([L], dtype=torch.int32), L, N, one, one, sliding_window=W, causal=True)
    return out[:, 0].double()


def unified(fwd, q, k, v):
    """unified_attention on the same sequence and pages: window_size = (W - 1, 0)."""
    out = torch.empty(N, 1, D, dtype=q.dtype)
    fwd(q, k.reshape(L // P, P, 1, D), v.reshape(L // P, P, 1, D), out, torch.tensor([0, N], dtype=torch.int32), N,
        torch.tensor([L], dtype=torch.int32), L, 1.0 / math.sqrt(D), True, (W - 1, 0),
        torch.arange(L // P, dtype=torch.int32)[None], 0.0, None, None, None)
    return out[:, 0].double()


def right(q, k, v):
    s = (q[:, 0].double() @ k[:, 0].double().T) / math.sqrt(D)
    i, j = torch.arange(N)[:, None] + L - N, torch.arange(L)[None, :]
    keep = (j <= i) & (i - j < W)
    return torch.softmax(s.masked_fill(~keep, -math.inf), -1) @ v[:, 0].double()


def main():
    context, unified_fwd = kernels()
    print(f"one sequence of {L} tokens: {L - N} cached (pages of {P}), the last {N} new; causal window W = {W}, fp16")
    dead = L - N - W + 1  # keys before the first new token's window
    for what, poison in ((f"pages 0-1 (keys 0-{2 * P - 1}, freed) hold NaN", slice(0, 2 * P)),
                         (f"key {dead - 1} (before every window, in a retained page) holds NaN", slice(dead - 1, dead))):
        q, k, v, k_nan, v_nan = inputs(poison)
        want = right(q, k, v)
        for name, fn, f in (("prefix_prefill", prefix_prefill, context), ("unified_attention", unified, unified_fwd)):
            got = fn(f, q, k_nan, v_nan)
            bad = int(torch.isnan(got).any(-1).sum())
            err = (got - want).abs().max().item()
            print(f"  {what}: {name:17s} o[0, :3] = {[round(x, 4) for x in got[0, :3].tolist()]}"
                  f"  right: {[round(x, 4) for x in want[0, :3].tolist()]}  NaN rows {bad} of {N}, max error {err:.3g}")


if __name__ == "__main__":
    main()
