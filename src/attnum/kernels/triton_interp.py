"""``triton-interpret:FILE.py:FUNCTION`` (or ``triton-interpret:package.module:function``): a user's Triton
attention run on CPU tensors by Triton's interpreter (``TRITON_INTERPRET=1``).

``@triton.jit`` reads ``TRITON_INTERPRET`` when it *decorates* a kernel, so the variable is set here
before the user's module is imported (a file target is imported afresh each time; a module imported
earlier without it keeps its compiled kernels, which then refuse CPU tensors). The interpreter runs
each program instance in numpy: exact IEEE fp32/fp16 arithmetic, bf16 through float32, loads and
stores bounds-checked only by the kernel's own masks -- so an unmasked read past a tensor's end
reads whatever lies there, as on a GPU.

The function must have SDPA's signature (see :mod:`attnum.kernels.user`); a Triton kernel with its
own signature is wrapped in a few lines that refuse what it cannot express (docs/audit.md, "Real
kernels"). Declared conventions are read from the function's ``attnum_causal_alignment`` /
``attnum_empty_rows`` attributes, as for any user callable.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from attnum.errors import AttnumEnvironmentError
from attnum.kernels import user

PREFIX = "triton-interpret"
PACKAGE = "triton"
EXTRA = "triton"
DEVICES = ("cpu",)


def enable() -> None:
    """Turn Triton's interpreter on for every kernel decorated from now on."""
    os.environ["TRITON_INTERPRET"] = "1"


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


def load(spec: str, full_spec: str | None = None) -> Callable:
    """The user's SDPA-signature callable ``spec`` (``file.py:function``), imported with the interpreter on."""
    enable()
    _check_interpreting()
    fn = user.load_user_target(spec)

    @functools.wraps(fn)
    def call(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if query.device.type != "cpu":
            raise NotImplementedError(f"{full_spec or spec}: Triton's interpreter runs on CPU tensors, "
                                      f"not {query.device}")
        kw = {"attn_mask": attn_mask, "is_causal": is_causal, "scale": scale}
        if enable_gqa:
            kw["enable_gqa"] = True
        return fn(query, key, value, **kw)

    return call
