"""Every attention name resolves here: to a callable with the SDPA signature, or a reason it cannot run.

Every attention is called as ``fn(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
scale=None, enable_gqa=False)`` with (B, H, N, d) tensors, like
``torch.nn.functional.scaled_dot_product_attention``, and returns ``query.dtype``. Names:

- attnum's own implementations (:mod:`attnum.kernels.reference`): ``golden``, ``eager``,
  ``baseline:POLICY``, ``flash:POLICY`` (the ``baseline:`` and ``flash:`` prefixes are reserved);
- real kernels (:data:`KERNELS`): torch SDPA and its backends, and the kernels of every adapter module
  (:mod:`attnum.kernels.adapters`: one module per upstream project, each listing its ``KERNELS``);
- a user's callable: ``package.module:function`` or ``path/to/file.py:function``
  (:mod:`attnum.kernels.user`), or ``triton-interpret:`` and either, for a Triton kernel run on CPU by
  Triton's interpreter (:mod:`attnum.kernels.triton.interp`).

A name that is known but cannot run here (package or device missing) resolves to an *unavailable*
:class:`Target` that says why; anything else is an :class:`attnum.errors.AttnumInputError` listing the
known names (the CLI exits 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnum.errors import AttnumInputError, did_you_mean
from attnum.kernels import conventions, reference, serving, user
from attnum.kernels.adapters import (
    fla,
    flash_attn,
    flashinfer,
    pallas,
    pytorch,
    ring_flash_attn,
    sageattention,
    sglang,
    vllm,
    xformers,
)
from attnum.kernels.protocol import Kernel, SdpaFn
from attnum.kernels.triton import interp as triton_interp

_ANY_DEVICE = ("cpu", "cuda")  # attnum's implementations and user callables run wherever torch does


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


# The adapters, one module per upstream project (attnum.kernels.adapters), each listing its kernels.
ADAPTERS = (pytorch, flash_attn, flashinfer, xformers, pallas, vllm, sglang, sageattention, fla, ring_flash_attn)

KERNELS: dict[str, Kernel] = {k.name: k for k in (
    _sdpa("torch-sdpa", None, ("cpu", "cuda"), "F.scaled_dot_product_attention with torch's default backend choice"),
    _sdpa("torch-sdpa-math", "MATH", ("cpu", "cuda"), "SDPBackend.MATH (bf16/fp16 upcast to fp32 inside)"),
    _sdpa("torch-sdpa-flash", "FLASH_ATTENTION", ("cpu", "cuda"),
          "SDPBackend.FLASH_ATTENTION (CPU: FlashAttentionKernel.cpp, KV tile 512)"),
    _sdpa("torch-sdpa-efficient", "EFFICIENT_ATTENTION", ("cuda",), "SDPBackend.EFFICIENT_ATTENTION (memory-efficient)"),
    _sdpa("torch-sdpa-cudnn", "CUDNN_ATTENTION", ("cuda",), "SDPBackend.CUDNN_ATTENTION"),
    *(k for mod in ADAPTERS for k in mod.KERNELS),
)}
if len(KERNELS) != 5 + sum(len(mod.KERNELS) for mod in ADAPTERS):
    raise ValueError("two adapters register the same kernel name")
if set(user.RESERVED_PREFIXES) != {*reference.FAMILIES, "decode", triton_interp.PREFIX}:
    raise ValueError("attnum.kernels.user.RESERVED_PREFIXES must be the registry's reserved NAME: prefixes")


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
    from attnum.kernels.wheels.stand_ins import importable

    return importable(package)  # a fetched kernel's stand-in module is not an installed package


# The optional packages that a pyproject extra installs (pallas-*: jax; triton-interpret:: triton).
_EXTRAS = {**{k.package: k.extra for k in KERNELS.values() if k.extra}, triton_interp.PACKAGE: triton_interp.EXTRA}


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


def split_version(spec: str) -> tuple[str, str | None]:
    """``"vllm-unified@0.30.0"`` -> ("vllm-unified", "0.30.0") for a built-in kernel whose files attnum
    fetches; any other string -> (string, None) (a path may hold an ``@``). The version is checked against
    the pin table: one it lacks is an AttnumInputError listing those it has (exit 2)."""
    name, at, version = spec.strip().rpartition("@")
    kern = KERNELS.get(name) if at else None
    if kern is None:
        return spec.strip(), None
    if kern.source is None:
        raise AttnumInputError(f"target={spec.strip()!r} is not allowed: {name} runs the installed "
                               f"{kern.package or 'torch'}, whose version attnum does not choose; name it without @")
    from attnum.kernels.wheels import source as wheels

    if not version.strip():  # "vllm-unified@" is not the default under a name that says nothing (fetch refuses it too)
        raise AttnumInputError(f"target={spec.strip()!r} is not allowed; expected {name}@VERSION with a version of "
                               f"{kern.source} ({', '.join(wheels.packages()[kern.source].versions)}), or {name} "
                               "alone for the pinned default")
    return name, wheels.version_of(kern.source, version)


def kernel_status(name: str, device: str | None = "cpu", version: str | None = None) -> tuple[bool, str]:
    """(available, reason): whether the real kernel ``name`` (at ``version`` of the package it is fetched
    from; None: the pinned default) can run on ``device`` here, and why not."""
    kernel = get_kernel(name)
    ok, why = _status(name, kernel.devices, kernel.package, device)
    need = kernel.requires(version) if kernel.requires is not None else ""
    if not need and kernel.check is not None and kernel.source is not None:
        from attnum.kernels.wheels import source as wheels

        need = kernel.check(wheels.version_of(kernel.source, version))
    if need:
        return False, "; ".join(filter(None, (why, need)))
    return ok, why


def available_kernels(device: str | None = "cpu") -> dict[str, tuple[bool, str]]:
    return {name: kernel_status(name, device) for name in KERNELS}


def resolve(spec: str | SdpaFn, device: str | None = "cpu", *, block_q: int | None = None,
            block_k: int | None = None, param: str = "attention", numerics: str = "faithful",
            arch: str = "sm90", runs_here: bool = True) -> Target:
    """Resolve ``spec`` for ``device`` (None: whichever device the tensors will be on).

    ``spec`` is a name (see the module docstring) or an SDPA-signature callable, taken as is.
    ``block_q``/``block_k`` are flash's tiles and ignored by every other name. ``numerics``: the
    arithmetic of Triton's interpreter for interpreted Triton targets
    (:data:`attnum.kernels.triton.interp.NUMERICS`); ``arch``: the GPU whose tensor cores their ``tl.dot``
    runs on (:data:`attnum.kernels.triton.tensor_core.ARCHES`). ``runs_here``: the target will run in this
    process, which then holds the version ``NAME@VERSION`` names (refused in one line when it imported another
    version of the package); False for a look that only asks whether it can run (the parent of an isolated
    audit). Raises AttnumInputError (naming ``param``) for an unknown name, a bad policy or a bad user target.
    """
    if callable(spec):
        return Target(name=getattr(spec, "__name__", repr(spec)), fn=spec, available=True,
                      declared=conventions.declared(spec))
    if not isinstance(spec, str) or not spec.strip():
        raise _unknown(param, spec)
    spec = spec.strip()
    kind, sep, policy = spec.partition(":")
    base, version = split_version(spec)
    if base in KERNELS:
        kern = KERNELS[base]
        if kern.source is not None:
            from attnum.kernels.wheels import source as wheels

            version = version or wheels.packages()[kern.source].default  # a plain name: the pinned default
            if runs_here:  # this process runs that version (refused if it imported another)
                wheels.choose(kern.source, version)
        ok, why = kernel_status(base, device, version)
        fn = _pinned(kern.fn, kern.source, version) if kern.source is not None else kern.fn
        if ok and kern.triton and interpreted_triton(base, device):
            fn = triton_interp.serving_under(fn, numerics, arch)
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


def _pinned(target, package: str, version: str):
    """A copy of the serving target ``target`` whose every entry point runs ``version``'s files: each call first
    makes that version this process's (:func:`attnum.kernels.wheels.source.choose`, refused in one line when the
    process already imported another), so a target resolved as ``NAME@VERSION`` never runs the files of a
    version resolved after it (the adapters load the process's chosen version at their first call)."""
    import copy

    from attnum.kernels.wheels import source as wheels

    def pin(fn):
        @functools.wraps(fn)
        def call(*args, **kw):
            wheels.choose(package, version)
            return fn(*args, **kw)

        return call

    t = copy.copy(target)
    if getattr(t, "_sdpa", None) is not None:
        t._sdpa = pin(t._sdpa)
    for e in serving.ENTRIES[1:]:
        if callable(getattr(t, e, None)):
            setattr(t, e, pin(getattr(t, e)))
    return t


def runs_user_code(spec: object) -> bool:
    """Whether resolving ``spec`` imports a user's code (``module:function``, ``file.py:function``,
    ``triton-interpret:...``) rather than naming one of attnum's implementations or kernels."""
    if not isinstance(spec, str):
        return False
    spec = spec.strip()
    kind, sep, _ = spec.partition(":")
    if _base(spec) in KERNELS or spec in reference.NAMES or not sep:
        return False
    return kind not in reference.FAMILIES and kind != "decode"


def interpreted_triton(spec: str, device: str | None = "cpu") -> bool:
    """Whether ``spec`` names a Triton kernel that runs through Triton's interpreter on ``device``."""
    spec = spec.strip()
    if spec.startswith(triton_interp.PREFIX + ":"):
        return True
    kern = KERNELS.get(_base(spec))
    return bool(kern and getattr(kern, "triton", False) and (device or "cpu").startswith("cpu"))


def _base(spec: str) -> str:
    """The kernel name of ``NAME@VERSION`` (unchecked), else ``spec``."""
    name, at, _ = spec.rpartition("@")
    return name if at and name in KERNELS else spec


def check_policy_target(spec: object, formats: tuple[str, ...], param: str = "target") -> None:
    """Refuse, before any work, a built-in policy target (``flash:``, ``baseline:``, ``decode:POLICY``) whose
    policy ``compare`` would refuse with inputs of ``formats`` (the audited dtypes); other names pass."""
    if not isinstance(spec, str):
        return
    kind, sep, policy = spec.strip().partition(":")
    if not sep:
        return
    if kind in reference.FAMILIES:
        from attnum.numerics.policy import parse_policy

        try:
            parse_policy(policy)
        except AttnumInputError as why:
            raise AttnumInputError(f"{param}={spec.strip()!r} is not allowed: {why}") from None
    elif kind == "decode":
        serving.check_reference(policy, formats, param=param)


def arch_flag(arch: str | None, spec: str, device: str | None = "cpu", param: str = "--arch",
              numerics: str = "faithful") -> str:
    """The GPU a command's ``--arch`` names: sm90 when not given; given, only for a target whose Triton
    kernels attnum interprets on this device, under a numerics with a tensor-core model (for any other it
    would change nothing, and say nothing)."""
    from attnum.kernels.triton.tensor_core import DEFAULT_ARCH, check_arch

    if arch is None:
        return DEFAULT_ARCH
    arch = check_arch(arch)
    if triton_interp.check_numerics(numerics) == "raw":
        raise AttnumInputError(
            f"{param}={arch} is not allowed with --numerics raw: raw is Triton's interpreter as it is, whose tl.dot "
            "has no tensor-core model, so the architecture would change nothing; leave --arch out or use "
            "--numerics faithful")
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
