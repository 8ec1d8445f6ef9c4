"""Context-parallel attention implementations and whether this machine can run them.

Unlike :mod:`attnum.kernels.registry` (one SDPA-signature call), these run one call per rank inside a
process group; an adapter module lists them as ``CP_KERNELS`` (:class:`attnum.kernels.protocol.CpKernel`:
name, package, devices, layout, ``rank_attention``). attnum's own ring (:mod:`attnum.attention.parallel.ring`) runs everywhere.
"""

from __future__ import annotations

import torch

from attnum.errors import AttnumInputError
from attnum.kernels.adapters import pytorch, ring_flash_attn
from attnum.kernels.protocol import CpKernel

CP_KERNELS: dict[str, CpKernel] = {k.name: k for mod in (ring_flash_attn, pytorch) for k in mod.CP_KERNELS}


def _installed(package: str) -> bool:
    from attnum.kernels.wheels.stand_ins import importable

    return importable(package)  # a fetched kernel's stand-in module is not an installed package


def cp_status(name: str) -> tuple[bool, str]:
    """(available, reason) for a context-parallel kernel on this machine."""
    if name not in CP_KERNELS:
        raise AttnumInputError(f"kernel={name!r} is not allowed; expected one of {sorted(CP_KERNELS)}")
    kern = CP_KERNELS[name]
    why = []
    if not _installed(kern.package):
        why.append(f"package {kern.package!r} is not installed")
    if "cuda" in kern.devices and "cpu" not in kern.devices and not torch.cuda.is_available():
        why.append(f"{name} runs on {', '.join(kern.devices)} only, and CUDA is not available on this machine")
    return not why, "; ".join(why)


def available_cp_kernels() -> dict[str, tuple[bool, str]]:
    return {name: cp_status(name) for name in CP_KERNELS}
