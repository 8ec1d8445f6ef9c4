"""Real attention kernels behind one signature, and which of them this machine can run.

Every kernel is called as ``fn(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
scale=None, enable_gqa=False)`` with (B, H, N, d) tensors, like
``torch.nn.functional.scaled_dot_product_attention``. Unknown names fail with the list of known ones.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnum.errors import AttnumInputError


@dataclass(frozen=True, kw_only=True)
class Kernel:
    name: str
    fn: Callable
    devices: tuple[str, ...]
    package: str | None = None
    doc: str = ""
    dtypes: tuple[torch.dtype, ...] = field(
        default=(torch.float64, torch.float32, torch.bfloat16, torch.float16)
    )


def _sdpa_backend(backend_name: str | None) -> Callable:
    def call(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        kwargs = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
        if enable_gqa:
            kwargs["enable_gqa"] = True
        if backend_name is None:
            return F.scaled_dot_product_attention(query, key, value, **kwargs)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, backend_name)):
            return F.scaled_dot_product_attention(query, key, value, **kwargs)

    call.__name__ = f"sdpa_{(backend_name or 'default').lower()}"
    return call


KERNELS: dict[str, Kernel] = {
    "torch-sdpa": Kernel(name="torch-sdpa", fn=_sdpa_backend(None), devices=("cpu", "cuda"),
                         doc="F.scaled_dot_product_attention with torch's default backend choice"),
    "torch-sdpa-math": Kernel(name="torch-sdpa-math", fn=_sdpa_backend("MATH"), devices=("cpu", "cuda"),
                              doc="SDPBackend.MATH (bf16/fp16 upcast to fp32 inside)"),
    "torch-sdpa-flash": Kernel(name="torch-sdpa-flash", fn=_sdpa_backend("FLASH_ATTENTION"), devices=("cpu", "cuda"),
                               doc="SDPBackend.FLASH_ATTENTION (CPU: FlashAttentionKernel.cpp, KV tile 512)"),
    "torch-sdpa-efficient": Kernel(name="torch-sdpa-efficient", fn=_sdpa_backend("EFFICIENT_ATTENTION"),
                                   devices=("cuda",), doc="SDPBackend.EFFICIENT_ATTENTION (memory-efficient)"),
    "torch-sdpa-cudnn": Kernel(name="torch-sdpa-cudnn", fn=_sdpa_backend("CUDNN_ATTENTION"), devices=("cuda",),
                               doc="SDPBackend.CUDNN_ATTENTION"),
}


def _register_adapters() -> None:
    """The SDPA-signature adapters of other libraries (modules beside this one); imported lazily by
    each adapter's ``sdpa``, so a missing package only makes that kernel unavailable."""
    from attnum.kernels import flash_attn, flashinfer, flex, xformers

    half = (torch.bfloat16, torch.float16)
    every = (torch.float64, torch.float32, *half)
    for mod, devices, package, dtypes in (
        (flex, ("cpu", "cuda"), None, every),
        (flash_attn, ("cuda",), "flash_attn", half),
        (flashinfer, ("cuda",), "flashinfer", half),
        (xformers, ("cpu", "cuda"), "xformers", (torch.float32, *half)),
    ):
        KERNELS[mod.NAME] = Kernel(name=mod.NAME, fn=mod.sdpa, devices=devices, package=package, dtypes=dtypes,
                                   doc=(mod.__doc__ or "").strip().splitlines()[0])


_register_adapters()


def get_kernel(name: str) -> Kernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise AttnumInputError(f"kernel={name!r} is not allowed; expected one of {sorted(KERNELS)}") from None


def kernel_status(name: str, device: str = "cpu") -> tuple[bool, str]:
    """(available, reason): whether ``name`` can run on ``device`` here, and why not."""
    kernel = get_kernel(name)
    dev = torch.device(device).type
    if dev not in kernel.devices:
        return False, f"{name} runs on {', '.join(kernel.devices)} only, not {dev}"
    if dev == "cuda" and not torch.cuda.is_available():
        return False, "CUDA is not available on this machine"
    if kernel.package and importlib.util.find_spec(kernel.package) is None:
        return False, f"package {kernel.package!r} is not installed"
    return True, "available"


def available_kernels(device: str = "cpu") -> dict[str, tuple[bool, str]]:
    return {name: kernel_status(name, device) for name in KERNELS}
