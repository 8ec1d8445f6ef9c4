"""Sampler targets of ``attnum spec-audit``: a registry name, ``package.module:function`` or
``path/to/file.py:function``.

The protocol (every target follows it; see docs/parallel.md)::

    sampler(target_probs, draft_probs, draft_tokens, generator) -> tokens

    target_probs (B, k+1, V) float64, rows sum to 1: p_1..p_{k+1}
    draft_probs  (B, k, V)   float64, rows sum to 1: q_1..q_k
    draft_tokens (B, k)      int64, x_j drawn from q_j by the auditor
    generator    torch.Generator to draw from (reproducibility)
    tokens       (B, k+1)    integer: the accepted drafts x_1..x_n, then the resampled (n < k) or
                             bonus (n = k) token, then -1 padding

B rows are independent steps (the auditor calls in batches of equal rows; a sampler may loop).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnum.errors import AttnumInputError
from attnum.kernels.user import import_file
from attnum.sampling import reference_sampler
from attnum.spec_audit import hf

SamplerFn = Callable[..., object]


@dataclass(frozen=True)
class Builtin:
    name: str
    package: str | None
    doc: str


BUILTINS = {
    "attnum": Builtin("attnum", None, "attnum.sampling.reference_sampler (textbook, float64)"),
    hf.NAME: Builtin(hf.NAME, hf.PACKAGE, "transformers.generation.utils._speculative_sampling"),
}


def _builtin(name: str) -> SamplerFn:
    b = BUILTINS[name]
    if b.package and importlib.util.find_spec(b.package) is None:
        raise AttnumInputError(f"target={name!r} is not available here: package {b.package!r} is not installed")
    return reference_sampler if name == "attnum" else hf.sampler


def resolve_sampler(spec: str | SamplerFn) -> tuple[str, SamplerFn]:
    """(name, callable) for a registry name, a ``module:function`` or ``file.py:function``."""
    if callable(spec):
        return getattr(spec, "__name__", repr(spec)), spec
    if not isinstance(spec, str) or not spec.strip():
        raise AttnumInputError(f"target={spec!r} is not allowed; expected one of {sorted(BUILTINS)}, "
                               "'package.module:function' or 'path/file.py:function'")
    spec = spec.strip()
    if spec in BUILTINS:
        return spec, _builtin(spec)
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise AttnumInputError(f"target={spec!r} is not allowed; expected one of {sorted(BUILTINS)}, "
                               "'package.module:function' or 'path/file.py:function'")
    if where.endswith(".py") or "/" in where:
        module = import_file(Path(where), spec)
    else:
        try:
            module = importlib.import_module(where)
        except Exception as exc:  # noqa: BLE001
            raise AttnumInputError(f"target {spec!r}: cannot import module {where!r}: {type(exc).__name__}: "
                                   f"{exc}".splitlines()[0]) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise AttnumInputError(f"target {spec!r}: {where!r} has no callable {attr!r}")
    try:
        inspect.signature(fn).bind(None, None, None, generator=None)
    except TypeError as exc:
        raise AttnumInputError(f"target {spec!r}: {attr}{inspect.signature(fn)} cannot be called as "
                               f"sampler(target_probs, draft_probs, draft_tokens, generator=...): {exc}") from None
    except ValueError:
        pass  # no signature to inspect: the call will tell
    return spec, fn
