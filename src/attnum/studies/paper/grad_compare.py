"""Gradients of one comparison point: dQ, dK, dV of flash and baseline against float64 autograd.

Implementations, all on the same inputs (float64 samples rounded to the policy's input format) and
the same upstream gradient dO (seeded, rounded to the input format):

- golden: float64 autograd straight through ``golden_attention``;
- flash: ``flash_attention``'s recomputing backward (``attnum.attention.flash_backward``);
- baseline: ``baseline_attention`` differentiated: every site rounded per policy in the forward
  *and* its gradient rounded to the same site's format on the way back
  (``attnum.numerics.rounding.round_ste``), matmul accumulators included -- the emulated same-precision
  baseline, available for every format;
- torch_eager / torch_flash (when the input format is a torch dtype): PyTorch autograd of op-by-op
  attention in that dtype (FlashAttention's test baseline), and PyTorch's own flash kernel's
  backward (CPU: FlashAttentionKernel.cpp) -- the validation reference for the re-implementation.

``ratio[grad][key]`` = err(flash vs golden) / err(baseline vs golden), FlashAttention's test ratio.
"""

from __future__ import annotations

import time

import torch

from attnum.attention import baseline_attention, flash_attention, golden_attention, masks
from attnum.attention.eager import eager_attention
from attnum.numerics.formats import torch_dtype
from attnum.numerics.metrics import deviation, error_ratio
from attnum.numerics.rounding import round_to
from attnum.studies.paper.compare import CompareConfig, compare_inputs, require_finite_golden

GRADS = ("dq", "dk", "dv")
_TORCH_NATIVE = ("fp64", "fp32", "bf16", "fp16")  # dtypes torch's eager and flash backends differentiate


def _grads(fn, q, k, v, do, dtype) -> tuple[dict[str, torch.Tensor], float]:
    qq, kk, vv = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    t0 = time.perf_counter()
    out = fn(qq, kk, vv)
    grads = torch.autograd.grad(out, (qq, kk, vv), do.to(out.dtype))
    return dict(zip(GRADS, (g.double() for g in grads))), time.perf_counter() - t0


def run_grad_compare(cfg: CompareConfig) -> dict:
    """{"config", "policy", "metrics": {impl_vs_golden: {grad: deviation}}, "ratio": {grad: {...}},
    "timing_s"}; impl in flash, baseline and (native formats) torch_eager, torch_flash."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnum.sweep.memory_budget import require_compare

    require_compare(cfg, grad=True)
    policy, (q, k, v) = compare_inputs(cfg)
    tiles = cfg.tiles()
    g = torch.Generator(device=q.device).manual_seed(cfg.seed + 1_000_003)
    B, H, N, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[-1]
    do = round_to(torch.randn(B, H, N, dv, dtype=torch.float64, generator=g, device=q.device), policy.inputs)
    causal = cfg.causal
    align = {"causal_alignment": cfg.causal_alignment}
    impls = {
        "golden": (lambda a, b, c: golden_attention(a, b, c, is_causal=causal, **align), torch.float64),
        "flash": (lambda a, b, c: flash_attention(a, b, c, is_causal=causal, **align, policy=policy, block_q=tiles.Br,
                                                  block_k=tiles.Bc, variant=cfg.variant, kv_order=cfg.kv_order),
                  torch.float64),
        "baseline": (lambda a, b, c: baseline_attention(a, b, c, is_causal=causal, **align, policy=policy),
                     torch.float64),
    }
    native = torch_dtype(policy.inputs) if policy.inputs.name in _TORCH_NATIVE else None
    if native is not None:
        gqa = q.shape[1] != k.shape[1]
        impls["torch_eager"] = (lambda a, b, c: eager_attention(a, b, c, is_causal=causal, enable_gqa=gqa, **align),
                                native)
        # torch's SDPA knows top-left causal only: another alignment goes in as an explicit bool mask
        N, S = q.shape[2], k.shape[2]
        sdpa_mask = None
        if causal and cfg.causal_alignment != "top_left" and N != S:
            sdpa_mask = masks.causal_bool(N, S, cfg.causal_alignment, device=q.device)
        sdpa_causal = causal and sdpa_mask is None

        def torch_flash(a, b, c):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(a, b, c, attn_mask=sdpa_mask,
                                                                        is_causal=sdpa_causal, enable_gqa=gqa)

        impls["torch_flash"] = (torch_flash, native)
    grads, timing = {}, {}
    for name, (fn, dtype) in impls.items():
        grads[name], timing[name] = _grads(fn, q, k, v, do, dtype)
    gold = grads.pop("golden")
    for gr in GRADS:
        require_finite_golden(gold[gr], cfg, what=f"golden {gr}")
    metrics = {
        f"{name}_vs_golden": {gr: deviation(grads[name][gr], gold[gr], fmt=policy.out) for gr in GRADS}
        for name in grads
    }
    metrics["flash_vs_baseline"] = {gr: deviation(grads["flash"][gr], grads["baseline"][gr], fmt=policy.out)
                                    for gr in GRADS}
    if "torch_flash" in grads:
        metrics["flash_vs_torch_flash"] = {gr: deviation(grads["flash"][gr], grads["torch_flash"][gr],
                                                         fmt=policy.out) for gr in GRADS}
    ratio = {
        gr: {key: error_ratio(metrics["flash_vs_golden"][gr], metrics["baseline_vs_golden"][gr], key)
             for key in ("max_abs", "mean_abs", "rmse")}
        for gr in GRADS
    }
    return {
        "config": cfg.to_dict(),
        "policy": {"name": policy.name, **policy.describe()},
        "tiles": {"Br": tiles.Br, "Bc": tiles.Bc, "Tc": tiles.Tc(k.shape[2])},
        "metrics": metrics,
        "ratio": ratio,
        "timing_s": timing,
    }


def grad_rows(result: dict) -> list[tuple[str, str, float, float, float, float]]:
    """(pair, grad, max_abs, mean_abs, rmse, max_ulp) rows of a ``run_grad_compare`` result, for printing."""
    rows = []
    for pair, per_grad in result["metrics"].items():
        for gr in GRADS:
            m = per_grad[gr]
            rows.append((pair, gr, m["max_abs"], m["mean_abs"], m["rmse"], m.get("max_ulp", float("nan"))))
    return rows
