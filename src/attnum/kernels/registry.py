"""Every attention name resolves here: to a callable with the SDPA signature, or a reason it cannot run.

Every attention is called as ``fn(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
scale=None, enable_gqa=False)`` with (B, H, N, d) tensors, like
``torch.nn.functional.scaled_dot_product_attention``, and returns ``query.dtype``. Names:

- attnum's own implementations (:mod:`attnum.kernels.reference`): ``golden``, ``eager``,
  ``baseline:POLICY``, ``flash:POLICY`` (the ``baseline:`` and ``flash:`` prefixes are reserved);
- real kernels (:data:`KERNELS`): torch SDPA and its backends, and the adapters beside this module
  (``torch-flex``, ``flash-attn``, ``flashinfer``, ``xformers``);
- a user's callable: ``package.module:function`` or ``path/to/file.py:function``
  (:mod:`attnum.kernels.user`), or ``triton-interpret:`` and either, for a Triton kernel run on CPU by
  Triton's interpreter (:mod:`attnum.kernels.triton_interp`).

A name that is known but cannot run here (package or device missing) resolves to an *unavailable*
:class:`Target` that says why; anything else is an :class:`attnum.errors.AttnumInputError` listing the
known names (the CLI exits 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnum.errors import AttnumInputError, did_you_mean
from attnum.kernels import (
    conventions,
    fla_attn,
    fla_nsa,
    flash_attn,
    flash_attn_kvcache,
    flashinfer,
    flashinfer_decode,
    flashinfer_merge,
    flashinfer_triton,
    flex,
    pallas_mha,
    pallas_tpu_flash,
    reference,
    ring_flash_attn_merge,
    sage_triton,
    serving,
    sglang_triton,
    triton_interp,
    user,
    vllm_merge,
    vllm_prefix_prefill,
    vllm_triton,
    wheels,
    xformers,
)

SdpaFn = Callable[..., torch.Tensor]
_EVERY_DTYPE = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
_ANY_DEVICE = ("cpu", "cuda")  # attnum's implementations and user callables run wherever torch does


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """A real kernel: ``fn`` runs on ``devices`` when ``package`` is importable, for ``dtypes``."""

    name: str
    fn: SdpaFn
    devices: tuple[str, ...]
    package: str | None = None
    doc: str = ""
    dtypes: tuple[torch.dtype, ...] = field(default=_EVERY_DTYPE)
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "causal_alignment", conventions.causal_alignment(self.causal_alignment))
        object.__setattr__(self, "empty_rows", conventions.empty_rows(self.empty_rows))


@dataclass(frozen=True, kw_only=True)
class Target:
    """A resolved name: ``fn`` is None exactly when it is unavailable here (``reason`` says why)."""

    name: str
    fn: SdpaFn | None
    available: bool
    reason: str = ""
    # What the target declares (attnum.kernels.conventions); absent keys: undeclared.
    declared: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.available != (self.fn is not None):
            raise ValueError(f"target {self.name!r}: available={self.available} needs fn to be "
                             f"{'a callable' if self.available else 'None'}")


def _sdpa_backend(backend_name: str | None) -> SdpaFn:
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


def _sdpa(name: str, backend: str | None, devices: tuple[str, ...], doc: str) -> Kernel:
    return Kernel(name=name, fn=_sdpa_backend(backend), devices=devices, doc=doc)


# Conventions of the adapters whose modules do not state them: flash-attn >= 2.1 and FlashInfer align
# causal bottom-right, and both write
# 0 for rows with no key (flash-attn#1778 "the top of the output will be zero", FlashInfer's
# state_t::normalize after flashinfer#4401). xformers' LowerTriangularMask and flex (through
# attention.masks) are top-left.
_CONVENTIONS = {
    "flash-attn": ("bottom_right", "zeros"),
    "flash-attn-kvcache": ("bottom_right", "zeros"),
    "flashinfer": ("bottom_right", "zeros"),
    "flashinfer-decode": ("bottom_right", "zeros"),
}


def _adapter(mod) -> Kernel:
    """An adapter module beside this one; it imports its package lazily inside ``sdpa``, so a
    missing package only makes that kernel unavailable. A module may declare its conventions as
    ``CAUSAL_ALIGNMENT`` and ``EMPTY_ROWS``."""
    align, empty = _CONVENTIONS.get(mod.NAME, (conventions.DEFAULT_CAUSAL_ALIGNMENT, conventions.DEFAULT_EMPTY_ROWS))
    states = tuple(f for f, const in (("causal_alignment", "CAUSAL_ALIGNMENT"), ("empty_rows", "EMPTY_ROWS"))
                   if mod.NAME in _CONVENTIONS or hasattr(mod, const))
    return Kernel(name=mod.NAME, fn=mod.sdpa, devices=mod.DEVICES, package=mod.PACKAGE, dtypes=mod.DTYPES,
                  doc=(mod.__doc__ or "").strip().splitlines()[0],
                  causal_alignment=getattr(mod, "CAUSAL_ALIGNMENT", align), empty_rows=getattr(mod, "EMPTY_ROWS", empty),
                  declares=states, interpreted=getattr(mod, "INTERPRETED", False))


def _serving_triton(mod, target: serving.ServingTarget, doc: str, *, triton: bool = True) -> Kernel:
    """A third-party Triton serving kernel (attnum.kernels.sglang_triton / vllm_triton / flashinfer_triton): CPU
    through the interpreter, CUDA natively; its code from the installed package or the fetched wheel.
    ``triton=False``: plain PyTorch from a fetched wheel (ring-flash-attn's merge), run as is. All are audit
    targets (``interpreted``): a sweep's "all" leaves them out (a merge has no SDPA entry point anyway)."""
    declared = serving.empty_rows_of(target, "sdpa")
    states = tuple(f for f in ("causal_alignment", "empty_rows") if hasattr(target, conventions.ATTRIBUTES[f]))
    return Kernel(name=target.name, fn=target, devices=("cpu", "cuda"), package=None, dtypes=mod.DTYPES, doc=doc,
                  causal_alignment=getattr(target, "attnum_causal_alignment", conventions.DEFAULT_CAUSAL_ALIGNMENT),
                  empty_rows=declared, declares=states, interpreted=True, triton=triton,
                  requires=lambda pkg=mod.PACKAGE: wheels.missing(pkg), emulation=getattr(target, "emulation", None))


KERNELS: dict[str, Kernel] = {k.name: k for k in (
    _sdpa("torch-sdpa", None, ("cpu", "cuda"), "F.scaled_dot_product_attention with torch's default backend choice"),
    _sdpa("torch-sdpa-math", "MATH", ("cpu", "cuda"), "SDPBackend.MATH (bf16/fp16 upcast to fp32 inside)"),
    _sdpa("torch-sdpa-flash", "FLASH_ATTENTION", ("cpu", "cuda"),
          "SDPBackend.FLASH_ATTENTION (CPU: FlashAttentionKernel.cpp, KV tile 512)"),
    _sdpa("torch-sdpa-efficient", "EFFICIENT_ATTENTION", ("cuda",), "SDPBackend.EFFICIENT_ATTENTION (memory-efficient)"),
    _sdpa("torch-sdpa-cudnn", "CUDNN_ATTENTION", ("cuda",), "SDPBackend.CUDNN_ATTENTION"),
    *(_adapter(mod) for mod in (flex, flash_attn, flashinfer, xformers)),
    *(_adapter(mod) for mod in (pallas_mha, pallas_tpu_flash)),  # CPU, interpret mode; extra "jax"
    *(_adapter(mod) for mod in (flashinfer_merge, flashinfer_decode, flash_attn_kvcache, vllm_merge)),
    *(_serving_triton(mod, target, doc) for mod, target, doc in (
        (sglang_triton, sglang_triton.DECODE, "SGLang decode_attention_fwd (Triton; single query, token pool)"),
        (sglang_triton, sglang_triton.MERGE, "SGLang merge_state_triton (Triton)"),
        (sglang_triton, sglang_triton.EXTEND, "SGLang extend_attention_fwd (Triton; prefill over a prefix, as SDPA)"),
        (vllm_triton, vllm_triton.UNIFIED, "vLLM unified_attention (Triton; prefill as SDPA, paged decode)"),
        (vllm_triton, vllm_triton.MERGE, "vLLM merge_attn_states (Triton)"),
        (vllm_triton, vllm_triton.TRITON_DECODE, "vLLM triton_decode_attention (Triton; single query, paged, LSE)"),
        (vllm_triton, vllm_triton.MLA_DECODE, "vLLM triton_decode_attention, MLA path (Triton; latent cache, "
                                              "d = dv + rope, single query, paged, LSE)"),
        (vllm_prefix_prefill, vllm_prefix_prefill.PREFIX_PREFILL,
         "vLLM prefix_prefill context_attention_fwd (Triton; prefill over a paged prefix, as SDPA and decode)"),
        (sglang_triton, sglang_triton.CONTEXT, "SGLang context_attention_fwd (Triton; prefill, N = S, as SDPA)"),
        (sage_triton, sage_triton.TARGET, "SageAttention 1.0.6 sageattn (Triton; INT8 Q K, fp16 P V; as SDPA)"),
        (flashinfer_triton, flashinfer_triton.MERGE, "FlashInfer 0.7.2 triton merge_state (two states, LSE base 2)"),
        (flashinfer_triton, flashinfer_triton.MERGE_N, "FlashInfer 0.7.2 triton merge_states (n states, base 2)"),
        (flashinfer_triton, flashinfer_triton.MERGE_VARLEN,
         "FlashInfer 0.7.2 triton variable_length_merge_states (indptr, base 2)"),
        (fla_attn, fla_attn.TARGET, "fla-core 0.6.0 parallel_attn (Triton; causal softmax attention, GQA, window, "
                                    "sinks; N = S)"),
        (fla_attn, fla_attn.DECODE, "fla-core 0.6.0 attn_decoding_one_step (Triton; single query, varlen, "
                                    "no split)"),
        (fla_nsa, fla_nsa.TARGET, "fla-core 0.6.0 parallel_nsa selected-block branch (Triton; NSA, causal, "
                                  "GQA groups of 16+, block_select)"))),
    _serving_triton(ring_flash_attn_merge, ring_flash_attn_merge.MERGE,
                    "ring-flash-attn 0.1.8 update_out_and_lse (PyTorch sigmoid merge, natural log)", triton=False),
)}


def sweep_kernel_names() -> tuple[str, ...]:
    """What a sweep spec's ``kernels = "all"`` runs: every registered kernel but the interpreted ones."""
    return tuple(name for name, k in KERNELS.items() if not k.interpreted)


def builtin_names() -> list[str]:
    """Every built-in name: attnum's implementations (families as ``NAME:POLICY``), then real kernels."""
    return [*reference.NAMES, *(f"{f}:POLICY" for f in reference.FAMILIES), "decode:POLICY", *sorted(KERNELS)]


def _unknown(param: str, spec: object) -> AttnumInputError:
    hint = did_you_mean(spec, [n for n in builtin_names() if not n.endswith(":POLICY")])
    return AttnumInputError(f"{param}={spec!r} is not allowed; {hint}expected a built-in "
                            f"({', '.join(builtin_names())}), 'package.module:function' or 'path/file.py:function'")


def get_kernel(name: str) -> Kernel:
    """The real kernel ``name`` (not attnum's own implementations, not user callables)."""
    try:
        return KERNELS[name]
    except KeyError:
        raise AttnumInputError(f"kernel={name!r} is not allowed; expected one of {sorted(KERNELS)}") from None


def _installed(package: str) -> bool:
    from attnum.kernels.wheel_stand_ins import importable

    return importable(package)  # a fetched kernel's stand-in module is not an installed package


# The optional packages that a pyproject extra installs (pallas-*: jax; triton-interpret:: triton).
_EXTRAS = {pallas_mha.PACKAGE: pallas_mha.EXTRA, triton_interp.PACKAGE: triton_interp.EXTRA}


def _status(name: str, devices: tuple[str, ...], package: str | None, device: str | None) -> tuple[bool, str]:
    """(available, reason); ``device=None`` asks whether any of ``devices`` exists on this machine."""
    why = []
    if package and not _installed(package):
        extra = _EXTRAS.get(package)
        why.append(f"package {package!r} is not installed" + (f" (pip install 'attnum[{extra}]')" if extra else ""))
    cuda = torch.cuda.is_available()
    if device is None:
        if not any(d != "cuda" or cuda for d in devices):
            why.append(f"{name} runs on {', '.join(devices)} only, and CUDA is not available on this machine")
    else:
        dev = torch.device(device).type
        if dev not in devices:
            why.append(f"{name} runs on {', '.join(devices)} only, not {dev}")
        elif dev == "cuda" and not cuda:
            why.append("CUDA is not available on this machine")
    return not why, "; ".join(why)


def kernel_status(name: str, device: str | None = "cpu") -> tuple[bool, str]:
    """(available, reason): whether the real kernel ``name`` can run on ``device`` here, and why not."""
    kernel = get_kernel(name)
    ok, why = _status(name, kernel.devices, kernel.package, device)
    need = kernel.requires() if kernel.requires is not None else ""
    if need:
        return False, "; ".join(filter(None, (why, need)))
    return ok, why


def available_kernels(device: str | None = "cpu") -> dict[str, tuple[bool, str]]:
    return {name: kernel_status(name, device) for name in KERNELS}


def resolve(spec: str | SdpaFn, device: str | None = "cpu", *, block_q: int | None = None,
            block_k: int | None = None, param: str = "attention", numerics: str = "faithful",
            arch: str = "sm90") -> Target:
    """Resolve ``spec`` for ``device`` (None: whichever device the tensors will be on).

    ``spec`` is a name (see the module docstring) or an SDPA-signature callable, taken as is.
    ``block_q``/``block_k`` are flash's tiles and ignored by every other name. ``numerics``: the
    arithmetic of Triton's interpreter for interpreted Triton targets
    (:data:`attnum.kernels.triton_interp.NUMERICS`); ``arch``: the GPU whose tensor cores their ``tl.dot``
    runs on (:data:`attnum.kernels.triton_tensor_core.ARCHES`). Raises AttnumInputError (naming ``param``) for
    an unknown name, a bad policy or a bad user target.
    """
    if callable(spec):
        return Target(name=getattr(spec, "__name__", repr(spec)), fn=spec, available=True,
                      declared=conventions.declared(spec))
    if not isinstance(spec, str) or not spec.strip():
        raise _unknown(param, spec)
    spec = spec.strip()
    kind, sep, policy = spec.partition(":")
    if spec in KERNELS:
        ok, why = kernel_status(spec, device)
        kern = KERNELS[spec]
        fn = kern.fn
        if ok and kern.triton and interpreted_triton(spec, device):
            fn = triton_interp.serving_under(kern.fn, numerics, arch)
        declared = {f: getattr(kern, f) for f in kern.declares}
        if kern.emulation:
            declared["emulation"] = kern.emulation
        return Target(name=spec, fn=fn if ok else None, available=ok, reason=why, declared=declared)
    if spec in reference.NAMES:
        fn = reference.builtin(spec)
    elif sep and kind in reference.FAMILIES:
        fn = reference.family(kind, policy, block_q=block_q, block_k=block_k)
    elif sep and kind == "decode":  # attnum's serving target: flash SDPA + merge_state + decode
        fn = serving.reference(policy)
    elif sep and kind == triton_interp.PREFIX:  # a user's Triton kernel under TRITON_INTERPRET=1, on CPU
        ok, why = _status(spec, triton_interp.DEVICES, triton_interp.PACKAGE, device)
        fn = triton_interp.load(policy, spec, numerics=numerics, arch=arch) if ok else None
        return Target(name=spec, fn=fn, available=ok, reason=why, declared=conventions.declared(fn) if ok else {})
    elif user.is_user_spec(spec):
        if triton_interp.user_interprets() and (device or "cpu").startswith("cpu") \
                and _status(spec, triton_interp.DEVICES, triton_interp.PACKAGE, device)[0]:
            # TRITON_INTERPRET set by the user: the target's Triton kernels run in the interpreter, so
            # they run under its named model, as with the triton-interpret: prefix (issue 32, case 6)
            fn = triton_interp.load(spec, spec, numerics=numerics)
            return Target(name=spec, fn=fn, available=True, declared=conventions.declared(fn))
        fn = user.load_user_target(spec)
    else:
        raise _unknown(param, spec)
    ok, why = _status(spec, _ANY_DEVICE, None, device)
    return Target(name=spec, fn=fn if ok else None, available=ok, reason=why, declared=conventions.declared(fn))


def runs_user_code(spec: object) -> bool:
    """Whether resolving ``spec`` imports a user's code (``module:function``, ``file.py:function``,
    ``triton-interpret:...``) rather than naming one of attnum's implementations or kernels."""
    if not isinstance(spec, str):
        return False
    spec = spec.strip()
    kind, sep, _ = spec.partition(":")
    if spec in KERNELS or spec in reference.NAMES or not sep:
        return False
    return kind not in reference.FAMILIES and kind != "decode"


def interpreted_triton(spec: str, device: str | None = "cpu") -> bool:
    """Whether ``spec`` names a Triton kernel that runs through Triton's interpreter on ``device``."""
    spec = spec.strip()
    if spec.startswith(triton_interp.PREFIX + ":"):
        return True
    kern = KERNELS.get(spec)
    return bool(kern and getattr(kern, "triton", False) and (device or "cpu").startswith("cpu"))


def arch_flag(arch: str | None, spec: str, device: str | None = "cpu", param: str = "--arch") -> str:
    """The GPU a command's ``--arch`` names: sm90 when not given; given, only for a target whose Triton
    kernels attnum interprets on this device (for any other it would change nothing, and say nothing)."""
    from attnum.kernels.triton_tensor_core import DEFAULT_ARCH, check_arch

    if arch is None:
        return DEFAULT_ARCH
    arch = check_arch(arch)
    if not interpreted_triton(str(spec), device):
        raise AttnumInputError(
            f"{param}={arch} is not allowed with target {str(spec)!r}: it names the tensor cores of Triton kernels "
            "attnum interprets on the CPU (triton-interpret:FILE.py:FN, sglang-*, vllm-*, fla-*, sage1-triton, "
            "flashinfer-triton-*), and this target runs its own arithmetic; leave it out (policies take mma=ARCH)")
    return arch


def require(spec: str | SdpaFn, device: str | None = None, *, block_q: int | None = None,
            block_k: int | None = None, param: str = "attention") -> Target:
    """:func:`resolve`, and an AttnumInputError saying why when the target cannot run here."""
    target = resolve(spec, device, block_q=block_q, block_k=block_k, param=param)
    if not target.available:
        raise AttnumInputError(f"{param}={target.name!r} is not available here: {target.reason}")
    return target
