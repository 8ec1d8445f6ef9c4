"""A user's kernel as an audit target: ``package.module:function`` or ``path/to/file.py:function``.

The callable must follow ``torch.nn.functional.scaled_dot_product_attention``'s signature
``(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)``.
``dropout_p`` is never passed (audits are deterministic). A callable without ``enable_gqa`` is
accepted; GQA inputs then count as unsupported rather than as a crash. A file target is imported
with its own folder first on ``sys.path`` so it can import its sibling modules. Every problem is
one :class:`attnum.errors.AttnumInputError` line (the CLI exits 2).

A callable declares what SDPA's signature leaves open as attributes (attnum.kernels.conventions):
``fn.attnum_causal_alignment = "bottom_right"``, ``fn.attnum_empty_rows = "nan"``; the wrapper
below keeps them. ``attnum audit`` (and spec-audit, diverge) import the file or module in a kernel server
(attnum.sandbox.server), so whatever the import does cannot end the command.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

from attnum.errors import AttnumInputError

REQUIRED_KEYWORDS = ("attn_mask", "is_causal", "scale")
SIGNATURE = ("scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, "
             "is_causal=False, scale=None, enable_gqa=False)")


# Names before a colon that are attnum's own (baseline:POLICY, flash:POLICY, decode:POLICY) or a prefix
# (triton-interpret:FILE.py:FUNCTION), never a module; attnum.kernels.registry checks the list is its own.
RESERVED_PREFIXES = ("baseline", "flash", "decode", "triton-interpret")


def is_user_spec(spec: str) -> bool:
    return ":" in spec


def user_code(spec: str) -> str | None:
    """The ``module:function`` / ``file.py:function`` part of a target name that runs a user's code, or None
    for attnum's own names (read without importing anything)."""
    spec = spec.strip()
    kind, sep, rest = spec.partition(":")
    if not sep:
        return None
    if kind == "triton-interpret":
        return rest
    return None if kind in RESERVED_PREFIXES else spec


def precheck_target(target: str, param: str = "TARGET") -> None:
    """:func:`precheck` for whatever part of a target name is a user's code (nothing for attnum's own names)."""
    code = user_code(target)
    if code is not None:
        precheck(code, param=param)


def precheck(spec: str, param: str = "target") -> None:
    """What can be known about ``module:function`` / ``file.py:function`` without importing anything (so
    before torch, before any work): the form, and that the file exists or the top-level module is
    installed. The import and the signature are checked when the target is loaded."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise AttnumInputError(f"{param} {spec!r}: expected 'package.module:function' or 'path/file.py:function'")
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_file():
            what = "is a folder" if path.is_dir() else "does not exist"
            raise AttnumInputError(f"{param} {spec!r}: file {where!r} {what}")
        return
    top = where.split(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise AttnumInputError(f"{param} {spec!r}: cannot import module {where!r}: no module named {top!r} is "
                               "installed (a file needs its .py suffix or a path: ./mine.py:fn)")


def import_file(path: Path, spec: str):
    """Import a user's ``.py`` file as a fresh module; any failure is an AttnumInputError naming it."""
    if not path.is_file():
        raise AttnumInputError(f"target {spec!r}: file {str(path)!r} does not exist")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # siblings importable, also for imports done lazily at call time
    name = f"attnum_user_{abs(hash(str(path.resolve())))}_{path.stem}"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise AttnumInputError(f"target {spec!r}: cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    try:
        mod_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises is a usage error
        sys.modules.pop(name, None)
        raise AttnumInputError(f"target {spec!r}: importing {str(path)!r} failed: "
                               f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    return module


def _import_module(name: str, spec: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - whatever the import raises is a usage error
        raise AttnumInputError(f"target {spec!r}: cannot import module {name!r}: "
                               f"{type(exc).__name__}: {exc}".splitlines()[0]) from None


def check_signature(fn: Callable, spec: str) -> bool:
    """Raise unless ``fn`` can be called like SDPA; return whether it accepts ``enable_gqa``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True  # a builtin without introspection: trust it, the probes will tell
    params = list(sig.parameters.values())
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    problems = []
    if len(positional) < 3 and not var_pos:
        problems.append("it must take query, key, value positionally")
    if len(required) > 3:
        problems.append(f"it requires {required[3:]} beyond query, key, value")
    missing = [kw for kw in REQUIRED_KEYWORDS if kw not in names and not var_kw]
    if missing:
        problems.append(f"it lacks keyword(s) {missing}")
    if problems:
        raise AttnumInputError(f"target {spec!r}: signature {sig} does not follow {SIGNATURE}: "
                               + "; ".join(problems))
    return var_kw or "enable_gqa" in names


def load_user_target(spec: str) -> Callable:
    """Resolve ``module:function`` / ``file.py:function`` to an SDPA-compatible callable."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise AttnumInputError(f"target {spec!r}: expected 'package.module:function' or 'path/file.py:function'")
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    module = import_file(Path(where), spec) if is_file else _import_module(where, spec)
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise AttnumInputError(f"target {spec!r}: {where!r} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise AttnumInputError(f"target {spec!r}: {attr!r} is a {type(fn).__name__}, not a callable")
    if inspect.isclass(fn):  # a serving adapter: declared attributes + entry points (attnum.kernels.serving)
        from attnum.kernels.serving import declared_target

        return declared_target(fn, spec)
    if check_signature(fn, spec):
        return fn

    @functools.wraps(fn)
    def without_gqa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False, **features):
        if enable_gqa:
            raise NotImplementedError("target takes no enable_gqa argument")
        # softcap= / window_size= / sinks=, passed only to a target that declares them (conventions)
        return fn(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale, **features)

    return without_gqa
