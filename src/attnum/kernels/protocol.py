"""The record every adapter hands the registry: a real kernel, where it runs, and what it declares.

An adapter module (:mod:`attnum.kernels.adapters`) lists its upstream project's kernels as
``KERNELS = (Kernel(...), ...)`` (and context-parallel ones as ``CP_KERNELS``); the registry
(:mod:`attnum.kernels.registry`) and :mod:`attnum.kernels.context_parallel` collect them. The callables
behind a record speak the SDPA signature and, for serving kernels, the protocol of
:mod:`attnum.kernels.serving`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnum.kernels import conventions, serving
from attnum.kernels.wheels import source as wheels

SdpaFn = Callable[..., torch.Tensor]
EVERY_DTYPE = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """A real kernel: ``fn`` runs on ``devices`` when ``package`` is importable, for ``dtypes``."""

    name: str
    fn: SdpaFn
    devices: tuple[str, ...]
    package: str | None = None
    doc: str = ""
    dtypes: tuple[torch.dtype, ...] = field(default=EVERY_DTYPE)
    causal_alignment: str = conventions.DEFAULT_CAUSAL_ALIGNMENT  # see attnum.kernels.conventions
    empty_rows: str = conventions.DEFAULT_EMPTY_ROWS
    # Which of the two the adapter states (a module constant, _CONVENTIONS with its sources, a
    # ServingTarget argument); the audit names the others "SDPA default", never "declared".
    declares: tuple[str, ...] = ()
    # Runs through an interpreter (Pallas interpret mode): an audit target, ~10x too slow for the
    # per-point kernels of a sweep, so a spec's "all" leaves it out (a spec may still name it).
    interpreted: bool = False
    # A Triton kernel: on CPU it runs in Triton's interpreter under the audit's --numerics.
    triton: bool = False
    # Returns '' when the kernel's code can be loaded here, else why not (e.g. a wheel not fetched).
    requires: Callable[[], str] | None = None
    # A policy naming its designed arithmetic (a low-bit kernel: "sage1"); the audit judges against it.
    emulation: str | None = None
    # The pyproject extra that installs ``package`` (pallas-*: "jax"), named in the "not installed" reason.
    extra: str | None = None
    # The package whose pinned wheel ``attnum kernels fetch`` brings its code from (attnum.kernels.wheels).
    wheel: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "causal_alignment", conventions.causal_alignment(self.causal_alignment))
        object.__setattr__(self, "empty_rows", conventions.empty_rows(self.empty_rows))


def sdpa_kernel(name: str, fn: SdpaFn, *, package: str, devices: tuple[str, ...], dtypes: tuple[torch.dtype, ...],
                doc: str, causal_alignment: str | None = None, empty_rows: str | None = None,
                interpreted: bool = False, extra: str | None = None) -> Kernel:
    """A kernel of an installed package behind the SDPA signature; the conventions given are declared, the
    others are SDPA's defaults (and the audit says so)."""
    declares = tuple(f for f, v in (("causal_alignment", causal_alignment), ("empty_rows", empty_rows))
                     if v is not None)
    return Kernel(name=name, fn=fn, devices=devices, package=package, dtypes=dtypes, doc=doc,
                  causal_alignment=causal_alignment or conventions.DEFAULT_CAUSAL_ALIGNMENT,
                  empty_rows=empty_rows or conventions.DEFAULT_EMPTY_ROWS, declares=declares,
                  interpreted=interpreted, extra=extra)


def serving_kernel(target: serving.ServingTarget, doc: str, *, package: str, dtypes: tuple[torch.dtype, ...],
                   triton: bool = True) -> Kernel:
    """A third-party serving kernel whose code comes from the installed package or its pinned wheel: CPU
    through Triton's interpreter, CUDA natively. ``triton=False``: plain PyTorch from a fetched wheel
    (ring-flash-attn's merge), run as is. All are audit targets (``interpreted``): a sweep's "all" leaves
    them out (a merge has no SDPA entry point anyway)."""
    declared = serving.empty_rows_of(target, "sdpa")
    states = tuple(f for f in ("causal_alignment", "empty_rows") if hasattr(target, conventions.ATTRIBUTES[f]))
    return Kernel(name=target.name, fn=target, devices=("cpu", "cuda"), package=None, dtypes=dtypes, doc=doc,
                  causal_alignment=getattr(target, "attnum_causal_alignment", conventions.DEFAULT_CAUSAL_ALIGNMENT),
                  empty_rows=declared, declares=states, interpreted=True, triton=triton,
                  requires=lambda pkg=package: wheels.missing(pkg), emulation=getattr(target, "emulation", None),
                  wheel=package)


@dataclass(frozen=True, kw_only=True)
class CpKernel:
    """A context-parallel kernel: one call per rank inside a process group (:mod:`attnum.kernels.context_parallel`).

    ``rank_attention(q, k, v, *, causal, scale, group=None)`` returns this rank's output for its shard, laid out
    as ``layout`` says (``"zigzag"``, ``"round-robin"``)."""

    name: str
    package: str
    devices: tuple[str, ...]
    layout: str
    rank_attention: Callable[..., torch.Tensor]
