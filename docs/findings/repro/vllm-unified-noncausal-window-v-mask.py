"""vLLM's Triton unified attention (``triton_unified_attention.unified_attention``) with a sliding window and
``causal=False`` (bidirectional sequences: encoder-only models with local attention, DiffusionGemma's canvas,
per-sequence causal batches): the V rows of keys inside a query's window are zeroed whenever the key lies more
than W - 1 positions after the FIRST query of the query's 16-row block. Only the scores are masked per query;
the V mask that vLLM PR #30887 added (to stop 0 * NaN from freed pages) measures the distance from the block's
first query, ``dist = context_len + qpos_lo - key``, and for a two-sided window keeps ``-W < dist``, which is
the first query's right edge, not the row's. Rows past the first of each block lose the right part of their
window's values: silently wrong outputs, no NaN. The causal path is right (the same left edge only grows
along the block).

Runs on CPU in Triton's interpreter. Needs torch and triton, and vLLM's kernel files:
``pip download vllm==0.33.0 --no-deps`` and unzip it (0.34.0 has the same lines), then

    python vllm-unified-noncausal-window-v-mask.py path/to/unzipped/wheel

(the folder holding ``vllm/``). The kernel files import a few small vLLM modules (the platform probe, the
logger, the Triton re-export, ``KVQuantMode``); this script stands in for them with an NVIDIA sm90 platform and
loads only ``triton_attention_helpers.py`` and ``triton_unified_attention.py``. With vLLM installed and no path,
it imports the real ones. Prints the kernel's rows beside the right ones (float64 attention, |i - j| <= W - 1).
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


def kernel():
    if len(sys.argv) > 1:
        class KVQuantMode(enum.IntEnum):
            NONE = 0
            FP8_PER_TENSOR = 1
            INT8_PER_TOKEN_HEAD = 2
            FP8_PER_TOKEN_HEAD = 3
            INT4_PER_TOKEN_HEAD = 4
            NVFP4 = 5

        _stub("vllm.v1.kv_cache_interface", KVQuantMode=KVQuantMode)
        return vllm_ops(sys.argv[1], "triton_attention_helpers", "triton_unified_attention")[1].unified_attention
    return importlib.import_module("vllm.v1.attention.ops.triton_unified_attention").unified_attention


def attend(fwd, q, k, v, *, W, causal, P=16):
    """One sequence of N = S tokens (q, k, v (S, 1, d)), pages of P tokens, window W (vLLM's
    window_size = (W - 1, W - 1); its kernel reads window_size[0] only)."""
    S, _, d = q.shape
    out = torch.empty_like(q)
    table = torch.arange(-(-S // P), dtype=torch.int32)[None]
    pages = lambda x: torch.nn.functional.pad(x, (0, 0, 0, 0, 0, -S % P)).reshape(-1, P, 1, d)  # noqa: E731
    fwd(q, pages(k), pages(v), out, torch.tensor([0, S], dtype=torch.int32), S, torch.tensor([S], dtype=torch.int32),
        S, 1.0 / math.sqrt(d), causal, (W - 1, W - 1), table, 0.0, None, None, None)
    return out[:, 0].double()


def right(q, k, v, *, W, causal):
    S, _, d = q.shape
    s = (q[:, 0].double() @ k[:, 0].double().T) / math.sqrt(d)
    i, j = torch.arange(S)[:, None], torch.arange(S)[None, :]
    keep = (i - j).abs() < W
    if causal:
        keep &= j <= i
    return torch.softmax(s.masked_fill(~keep, -math.inf), -1) @ v[:, 0].double()


def main():
    fwd = kernel()
    g = torch.Generator().manual_seed(0)
    S, d, W = 48, 64, 9
    q, k, v = (torch.randn(S, 1, d, generator=g).half() for _ in range(3))
    for causal in (False, True):
        got, want = attend(fwd, q, k, v, W=W, causal=causal), right(q, k, v, W=W, causal=causal)
        err = (got - want).abs().max(-1).values
        print(f"causal={causal}, one sequence of {S} tokens, window W = {W} (|i - j| <= {W - 1}), fp16, "
              "16-query blocks:")
        for i in (16, 17, 20, 24, 31):
            print(f"  row {i:2d} (query {i - 16:2d} of its block): o[:3] = "
                  f"{[round(x, 4) for x in got[i, :3].tolist()]}  right: {[round(x, 4) for x in want[i, :3].tolist()]}"
                  f"  max error {err[i].item():.3g}")
        print(f"  max error over all rows: {err.max().item():.3g}")


if __name__ == "__main__":
    main()
