"""``triton-interpret:FILE.py:FUNCTION`` (or ``triton-interpret:package.module:function``): a user's Triton
attention run on CPU tensors by Triton's interpreter (``TRITON_INTERPRET=1``).

``@triton.jit`` reads ``TRITON_INTERPRET`` when it *decorates* a kernel, so the variable is set here
before the user's module is imported (a file target is imported afresh each time; a module imported
earlier without it keeps its compiled kernels, which then refuse CPU tensors). The interpreter runs
each program instance in numpy and dereferences the addresses a kernel computes; under :func:`under` each
one is first checked against the tensor argument it was derived from
(:mod:`attnum.kernels.triton.addresses`), so a read past a tensor's end is an ``out of bounds`` verdict on
every run rather than garbage or a SIGSEGV that depends on the heap. The arithmetic is the
GPU's (:mod:`attnum.kernels.triton.faithful`: bf16 rounded as sm80/sm90 round it, casts to nearest even,
``tl.dot`` honouring ``input_precision``, TF32 by default) unless ``numerics="raw"`` asks for the
interpreter's own (bf16 as 16-bit integers, truncating casts, exact fp32 dots). The faithful model's
self-test (:mod:`attnum.kernels.triton.selftest`) runs once per process before the first call; if it
fails, every call refuses (``unsupported``) with the reason.

The function must have SDPA's signature (see :mod:`attnum.kernels.user`); a Triton kernel with its
own signature is wrapped in a few lines that refuse what it cannot express (docs/audit.md, "Real
kernels"). Declared conventions are read from the function's ``attnum_causal_alignment`` /
``attnum_empty_rows`` attributes, as for any user callable.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from attnum.errors import AttnumEnvironmentError, bad_value
from attnum.kernels import user

PREFIX = "triton-interpret"
PACKAGE = "triton"
EXTRA = "triton"
DEVICES = ("cpu",)


_ENABLED_HERE = False  # whether attnum itself set TRITON_INTERPRET in this process (enable())


def enable() -> None:
    """Turn Triton's interpreter on for every kernel decorated from now on."""
    global _ENABLED_HERE
    if os.environ.get("TRITON_INTERPRET") != "1":
        _ENABLED_HERE = True
    os.environ["TRITON_INTERPRET"] = "1"


def user_interprets() -> bool:
    """Whether the user set ``TRITON_INTERPRET`` (Triton's own docs suggest it for CPU runs): then any
    Triton kernel a target launches runs in the interpreter, and the audit treats the target as if it
    were named ``triton-interpret:...`` (the faithful model, or ``--numerics raw`` said in the verdict),
    never as the raw interpreter under no name."""
    value = os.environ.get("TRITON_INTERPRET", "").strip().lower()
    return not _ENABLED_HERE and value not in ("", "0", "false", "off", "no")


def _check_interpreting() -> None:
    """Triton's own library (``tl.max``, ``tl.sum``, ... in triton.language.standard) is decorated when
    triton is imported: imported before TRITON_INTERPRET=1, those stay compiled, and every kernel that
    calls them fails inside the interpreter ("Cannot call @triton.jit'd outside of the scope of a kernel")."""
    import triton
    from triton.language import standard

    knobs = getattr(triton, "knobs", None)  # triton >= 3.4; older versions read the variable directly
    if knobs is not None and not knobs.runtime.interpret:
        raise AttnumEnvironmentError("TRITON_INTERPRET=1 is set but triton.knobs.runtime.interpret is off "
                                     "(something overrode it); unset the override and retry")
    if type(getattr(standard, "max", None)).__name__ == "JITFunction":
        raise AttnumEnvironmentError("triton was imported in this process before TRITON_INTERPRET=1 was set, so "
                                     "its library stays compiled; audit in a fresh process (attnum audit "
                                     "isolates by default) or set TRITON_INTERPRET=1 before importing triton")


NUMERICS = ("faithful", "raw", "faithful-ex2-approx")
"""``faithful``: the GPU's arithmetic, exp exact; ``faithful-ex2-approx``: the same with the approximate
ex2 model; ``raw``: Triton's interpreter as it is."""


def check_numerics(numerics: str) -> str:
    if numerics not in NUMERICS:
        raise bad_value("numerics", numerics, f"one of {', '.join(NUMERICS)}")
    return numerics


def label(numerics: str, arch: str = "sm90") -> str:
    """What verdicts say they ran under: ``triton-interp:nvidia-sm90`` (``,fp-fusion`` when
    fp32 multiply-adds are contracted, Triton's default through 3.9) / ``triton-interp:raw``."""
    from attnum.kernels.triton import faithful as triton_faithful

    check_numerics(numerics)
    return triton_faithful.name("raw" if numerics == "raw" else "faithful",
                                approx_exp=numerics == "faithful-ex2-approx", arch=arch)


def one_thread(fn: Callable) -> Callable:
    """``fn`` run with one torch thread (restored after). An interpreted kernel is thousands of tiny
    tensor operations per program instance (a 64 x 16 by 16 x 64 product in the faithful ``tl.dot``):
    a second thread only adds a barrier per operation, which on a loaded machine waits for a time
    slice (measured on 2 shared cores: 350 us per such product with 2 threads, 21 us with one).
    The values did not change where measured (a full sglang-context fp16 audit: every probe's target
    error bit-identical with one thread and with two; docs/audit.md, "How long a full audit takes")."""
    import torch

    @functools.wraps(fn)
    def call(*args, **kw):
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kw)
        finally:
            torch.set_num_threads(before)

    return call


def under(fn: Callable, numerics: str = "faithful", what: str = "", arch: str = "sm90") -> Callable:
    """``fn`` (which launches interpreted Triton kernels) run under ``numerics``, on one torch thread
    (:func:`one_thread`), every address its kernels load or store checked against the tensor argument
    it was derived from (:mod:`attnum.kernels.triton.addresses`: an access outside raises
    :class:`~attnum.kernels.triton.addresses.OutOfBounds`, under either numerics). Faithful numerics need
    the self-test to pass: otherwise every call raises NotImplementedError (``unsupported``)."""
    from attnum.kernels.triton import addresses
    from attnum.kernels.triton import faithful as triton_faithful
    from attnum.kernels.triton import selftest as triton_selftest

    check_numerics(numerics)
    raw = numerics == "raw"
    wrapped = one_thread(fn)
    if not raw:
        wrapped = triton_faithful.wrap(wrapped, approx_exp=numerics == "faithful-ex2-approx", arch=arch)

    @functools.wraps(fn)
    def call(*args, **kw):
        why = "" if raw else triton_selftest.failure(arch)
        if why:
            import triton

            raise NotImplementedError(f"{what or 'target'}: the faithful Triton model does not fit the installed "
                                      f"triton {triton.__version__} (self-test: {why}); --numerics raw runs the "
                                      "raw interpreter")
        try:
            with addresses.checked():
                return wrapped(*args, **kw)
        except Exception as exc:
            found = addresses.found_in(exc)
            if found is not None:  # the kernel's own access (or one the check refuses): its verdict
                raise found from None
            refused = None if raw else _not_modelled(exc)
            if refused is None:
                raise
            raise refused from exc

    if not raw:
        call.attnum_numerics = label(numerics, arch)
    return call


def _not_modelled(exc: BaseException) -> NotImplementedError | None:
    """The NotImplementedError of the faithful model (an operation it does not model) inside the
    InterpreterError Triton wraps it in, so that the case is ``unsupported``, not ``error``."""
    seen = exc
    while seen is not None:
        if isinstance(seen, NotImplementedError):
            return seen
        seen = seen.__cause__
    return None


def load(spec: str, full_spec: str | None = None, *, numerics: str = "faithful", arch: str = "sm90") -> Callable:
    """The user's SDPA-signature callable ``spec`` (``file.py:function``), imported with the interpreter on,
    run under ``numerics`` (:data:`NUMERICS`)."""
    check_numerics(numerics)
    enable()
    _check_interpreting()
    fn = user.load_user_target(spec)
    from attnum.kernels.serving import ServingTarget

    if isinstance(fn, ServingTarget):  # a serving adapter (a class with declared attributes)
        return serving_under(fn, numerics, arch)
    run = under(fn, numerics, full_spec or spec, arch)

    @functools.wraps(fn)
    def call(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
             **features):
        if query.device.type != "cpu":
            raise NotImplementedError(f"{full_spec or spec}: Triton's interpreter runs on CPU tensors, "
                                      f"not {query.device}")
        # softcap= / window_size= / sinks= / block_indices=: asked only of a function that declares them
        kw = {"attn_mask": attn_mask, "is_causal": is_causal, "scale": scale, **features}
        if enable_gqa:
            kw["enable_gqa"] = True
        return run(query, key, value, **kw)

    call.attnum_numerics = label(numerics, arch)
    return call


def serving_under(target, numerics: str = "faithful", arch: str = "sm90"):
    """A copy of the serving target ``target`` (attnum.kernels.serving) whose entry points launch their
    Triton kernels in the interpreter (enabled now, checked at the first call) under ``numerics``."""
    import copy

    enable()
    t = copy.copy(target)

    def prepared(fn, what):
        @functools.wraps(fn)
        def call(*args, **kw):
            _check_interpreting()
            return fn(*args, **kw)

        return under(call, numerics, what, arch)

    if getattr(t, "_sdpa", None) is not None:
        t._sdpa = prepared(t._sdpa, f"{t.name} (sdpa)")
    for e in ("decode", "merge_state", "merge_states", "varlen"):
        if callable(getattr(t, e, None)):
            setattr(t, e, prepared(getattr(t, e), f"{t.name} ({e})"))
    t.attnum_numerics = label(numerics, arch)
    return t
