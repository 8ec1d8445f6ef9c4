"""Real kernels at a sweep point: each available kernel's deviation from the float64 golden.

The inputs are the same seeded Q, K, V the emulation sees at that point (``attnum.workloads.inputs``), cast to
the point's native dtype, so the report can put the emulation next to what real kernels do.
A kernel the machine lacks is recorded as unavailable with the registry's reason, not as an error.

Kernels take the SDPA signature, whose ``is_causal`` is top-left aligned. A bottom-right causal
point hands them that mask as an explicit bool ``attn_mask`` instead (a kernel that takes no mask
is then recorded as unavailable), and the golden is computed with the same alignment. GQA points
(kv_heads < heads) call the kernels with ``enable_gqa=True``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from attnum.studies.paper.point import Point


def point_inputs(point: Point):
    """float64 q (B, H, N, d), k and v (B, G, S, d) for the point: the same seeded samples as compare."""
    from attnum.workloads.inputs import make_qkv

    return make_qkv(point.input_spec())


def kernel_masking(point: Point) -> dict[str, Any]:
    """The SDPA keywords that give a kernel the point's causal mask and GQA layout."""
    from attnum.attention.masks import causal_bool

    spec = point.input_spec()
    kw: dict[str, Any] = {"enable_gqa": spec.G != spec.heads}
    if point.causal and point.causal_alignment != "top_left":
        kw["attn_mask"] = causal_bool(spec.seq_len, spec.S, point.causal_alignment, device=point.device)
    else:
        kw["is_causal"] = point.causal
    return kw


def kernel_deviations(point: Point, *, dtype: torch.dtype, kernels: tuple[str, ...]) -> dict[str, Any]:
    """``{"kernels": {name: {"available": bool, "reason"|metrics...}}}`` for each named kernel."""
    from attnum.attention.golden import golden_attention
    from attnum.kernels.registry import get_kernel, kernel_status
    from attnum.numerics.formats import get_format
    from attnum.numerics.metrics import deviation

    # The kernel sees the inputs rounded to its dtype; the golden is exact attention on those same
    # values, as in compare (which rounds to the policy's input format first).
    device = torch.device(point.device)
    q, k, v = (t.to(dtype) for t in point_inputs(point))
    golden_BHNd = golden_attention(q.double(), k.double(), v.double(), is_causal=point.causal,
                                   causal_alignment=point.causal_alignment)
    masking = kernel_masking(point)
    fmt = get_format(point.format)
    out: dict[str, Any] = {}
    for name in kernels:
        available, reason = kernel_status(name, point.device)
        if not available:
            out[name] = {"available": False, "reason": reason}
            continue
        kernel = get_kernel(name)
        if dtype not in kernel.dtypes:
            out[name] = {"available": False, "reason": f"{name} does not take {str(dtype).removeprefix('torch.')}"}
            continue
        try:
            with warnings.catch_warnings():
                # Eager flex says once per process that it runs unfused; that is what we measure, and
                # the warning would break the progress bar.
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
                o_BHNd = kernel.fn(q.to(device), k.to(device), v.to(device), **masking)
        except Exception as err:  # noqa: BLE001 - e.g. a backend that refuses this dtype: say so, go on
            out[name] = {"available": False, "reason": f"raised {type(err).__name__}: {err}"}
            continue
        dev = deviation(o_BHNd.to(device="cpu", dtype=torch.float64), golden_BHNd, fmt=fmt)
        out[name] = {"available": True, "dtype": str(dtype).removeprefix("torch."), **dev}
    return {"kernels": out}
