"""From a TARGET string to a callable with the SDPA signature, or a reason it cannot run here.

TARGET is a built-in name (the registry's torch SDPA backends, and the adapters torch-flex,
flash-attn, flashinfer, xformers), ``package.module:function`` or ``path/to/file.py:function``.
A built-in whose package or device is missing is *unavailable* (not an error); anything else that
cannot be resolved is an :class:`attnum.errors.AttnumInputError` (the CLI exits 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from attnum.errors import AttnumInputError
from attnum.kernels import flash_attn, flashinfer, flex, registry, user, xformers

ADAPTERS: dict[str, ModuleType] = {m.NAME: m for m in (flex, flash_attn, flashinfer, xformers)}


@dataclass(frozen=True, kw_only=True)
class Target:
    """A resolved target: ``fn`` is None exactly when it is unavailable here (``reason`` says why)."""

    name: str
    fn: Callable | None
    available: bool
    reason: str = ""

    def __post_init__(self) -> None:
        if self.available and self.fn is None:
            raise ValueError(f"available target {self.name!r} needs a callable")


def builtin_names() -> list[str]:
    return sorted(set(registry.KERNELS) | set(ADAPTERS))


def resolve_target(spec: str, device: str = "cpu") -> Target:
    """Resolve ``spec`` for ``device``; raises AttnumInputError for a bad user target or unknown name."""
    spec = spec.strip()
    if spec in ADAPTERS:
        adapter = ADAPTERS[spec]
        ok, why = adapter.status(device)
        return Target(name=spec, fn=adapter.sdpa if ok else None, available=ok, reason=why)
    if spec in registry.KERNELS:
        ok, why = registry.kernel_status(spec, device)
        fn = registry.get_kernel(spec).fn if ok else None
        return Target(name=spec, fn=fn, available=ok, reason="" if ok else why)
    if user.is_user_spec(spec):
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return Target(name=spec, fn=None, available=False, reason="CUDA is not available on this machine")
        return Target(name=spec, fn=user.load_user_target(spec), available=True)
    raise AttnumInputError(f"target={spec!r} is not allowed; expected a built-in {builtin_names()}, "
                           "'package.module:function' or 'path/file.py:function'")
