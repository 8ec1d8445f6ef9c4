"""vLLM's Triton decode attention (``triton_decode_attention.decode_attention_fwd``, its MHA and its MLA
paths): a sequence of length 0 -- a CUDA-graph pad slot -- comes out 0 / 0 = NaN (vllm-project/vllm#57017;
PR #57094 open). SGLang's ``decode_attention_fwd`` has the same stage 2 (``acc / e_sum``).

Runs on CPU in Triton's interpreter. Needs torch, triton and packaging, and vLLM's kernel file:
``pip download vllm==0.33.0 --no-deps`` and unzip it (0.34.0 is the same here), then

    python vllm-triton-decode-zero-length-nan.py path/to/unzipped/wheel

(the folder holding ``vllm/``). The kernel file imports four small vLLM modules (the platform probe, the
logger, the Triton re-export); this script stands in for them with an NVIDIA sm90 platform and loads only
``vllm/v1/attention/ops/triton_decode_attention.py``. With vLLM installed and no path, it imports the real one.
Prints the kernel's output beside the right one (float64 attention; 0 for a sequence with no key).
"""

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
        return vllm_ops(sys.argv[1], "triton_decode_attention")[0].decode_attention_fwd
    return importlib.import_module("vllm.v1.attention.ops.triton_decode_attention").decode_attention_fwd


def right(q, k, v, lens):
    """float64: q (B, H, d), k, v (B, S, G, d / dv) -> (B, H, dv); a sequence with no key gives 0."""
    B, H, _ = q.shape
    out = torch.zeros(B, H, v.shape[-1], dtype=torch.float64)
    for b, L in enumerate(lens):
        if L:
            g = H // k.shape[2]
            kk = k[b, :L].double().repeat_interleave(g, 1).transpose(0, 1)  # (H, L, d)
            vv = v[b, :L].double().repeat_interleave(g, 1).transpose(0, 1)
            s = (q[b].double()[:, None] @ kk.transpose(-1, -2))[:, 0] / math.sqrt(q.shape[-1])
            out[b] = (torch.softmax(s, -1)[:, None] @ vv)[:, 0]
    return out


def run(fwd, *, H, G, d, dv, lens, splits, mla, P=16):
    g = torch.Generator().manual_seed(0)
    B, S = len(lens), max(lens)
    q = torch.randn(B, H, d, generator=g).half()
    k = torch.randn(B, S, G, d, generator=g).half()
    v = k[..., :dv].contiguous() if mla else torch.randn(B, S, G, dv, generator=g).half()
    n = -(-S // P)
    k_pages = k.reshape(B * n, P, G, d)  # sequence b owns pages b * n ... b * n + n - 1
    v_pages = v.reshape(B * n, P, G, dv)
    table = torch.arange(B * n, dtype=torch.int32).reshape(B, n)
    o = torch.empty(B, H, dv, dtype=torch.float16)
    lse = torch.empty(B, H)
    logits = torch.empty(B, H, splits, dv + 1)
    fwd(q, k_pages, v_pages, o, lse, table, torch.tensor(lens, dtype=torch.int32), logits, splits,
        1.0 / math.sqrt(d), page_size=P, is_mla=mla)
    want = right(q, k, v, lens)
    return o.double(), lse, want


def main():
    fwd = kernel()
    for what, kw in (("MHA, H = G = 4, d = 64", dict(H=4, G=4, d=64, dv=64, mla=False)),
                     ("MLA (is_mla), H = 16, one latent head, d = 576 = 512 + 64", dict(H=16, G=1, d=576, dv=512,
                                                                                          mla=True))):
        for splits in (1, 4):
            o, lse, want = run(fwd, lens=(0, 16), splits=splits, **kw)
            print(f"{what}, lengths (0, 16), {splits} split(s):")
            print(f"  length 0: o[0, 0, :3] = {o[0, 0, :3].tolist()}  lse[0, 0] = {lse[0, 0].item()}"
                  f"    right: {want[0, 0, :3].tolist()} (no key: 0)")
            err = (o[1] - want[1]).abs().max().item()
            print(f"  length 16: max |o - right| = {err:.2e} (fp16 output)")


if __name__ == "__main__":
    main()
