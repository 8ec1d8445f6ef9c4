"""Context-parallel attention implementations and whether this machine can run them.

Unlike :mod:`attnum.kernels.registry` (one SDPA-signature call), these run one call per rank inside a
process group; each adapter module gives ``NAME``, ``PACKAGE``, ``DEVICES``, ``LAYOUT`` and
``rank_attention``. attnum's own ring (:mod:`attnum.attention.ring`) runs everywhere.
"""

from __future__ import annotations

import torch

from attnum.errors import AttnumInputError
from attnum.kernels import ring_flash_attn, torch_cp

CP_KERNELS = {mod.NAME: mod for mod in (ring_flash_attn, torch_cp)}


def _installed(package: str) -> bool:
    from attnum.kernels.wheel_stand_ins import importable

    return importable(package)  # a fetched kernel's stand-in module is not an installed package


def cp_status(name: str) -> tuple[bool, str]:
    """(available, reason) for a context-parallel kernel on this machine."""
    if name not in CP_KERNELS:
        raise AttnumInputError(f"kernel={name!r} is not allowed; expected one of {sorted(CP_KERNELS)}")
    mod = CP_KERNELS[name]
    why = []
    if not _installed(mod.PACKAGE):
        why.append(f"package {mod.PACKAGE!r} is not installed")
    if "cuda" in mod.DEVICES and "cpu" not in mod.DEVICES and not torch.cuda.is_available():
        why.append(f"{name} runs on {', '.join(mod.DEVICES)} only, and CUDA is not available on this machine")
    return not why, "; ".join(why)


def available_cp_kernels() -> dict[str, tuple[bool, str]]:
    return {name: cp_status(name) for name in CP_KERNELS}
