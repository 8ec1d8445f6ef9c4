"""How an adapter calls a third-party entry point, checked against each version's signature.

A kernel file's entry point changes between versions: vLLM's ``unified_attention`` gained ``use_td`` in 0.22.0
and ``rswa_*`` in 0.25.0, SGLang 0.5.10 inserted two required positional arguments (``k_scale, v_scale``)
before ``sm_scale``, SageAttention 1.0.4 inserted ``tensor_layout`` as the fourth. An adapter states its call
as data (:class:`Call`): the leading arguments it passes by position, by name, the ones it passes only when
the version has them (``optional``), and what it passes for required ones a version added (``fills``).
:func:`problem` reads the version's signature from its fetched, verified file -- parsed, never run -- and
names in one line anything the call would get wrong: a renamed or reordered positional argument (a value in
the wrong place gives a silently wrong answer), a keyword the version lacks, a required argument the adapter
does not know. :func:`keywords` keeps, at call time, the optional keywords the loaded function takes.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field

from attnum.kernels.wheels import source


@dataclass(frozen=True, kw_only=True)
class Call:
    """``function`` of the kernel file ``<leaf>.py``, called with ``positional`` (names, in order), then
    ``keywords`` (always), ``optional`` (only where the version has them) and ``fills`` (required
    arguments some versions added, with the value the adapter passes: the neutral one)."""

    leaf: str
    function: str
    positional: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    fills: dict[str, object] = field(default_factory=dict)


def _params(path, function: str) -> list[tuple[str, bool]] | None:
    """[(name, required)] of the top-level ``def function`` in ``path`` (positional and keyword ones), or None."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            a = node.args
            pos = [*a.posonlyargs, *a.args]
            n_req = len(pos) - len(a.defaults)
            out = [(p.arg, i < n_req) for i, p in enumerate(pos)]
            out += [(k.arg, d is None) for k, d in zip(a.kwonlyargs, a.kw_defaults)]
            return out
    return None


def problem(package: str, version: str, call: Call) -> str:
    """'' when ``call`` fits ``version``'s entry point, else why not (one line). The files must be fetched
    and verified (``source.missing`` is '')."""
    module = source.module_named(package, call.leaf, version)
    who = f"{package} {version}"
    if module is None:
        return f"{who} ships no {call.leaf}.py (its kernel files: {', '.join(source.wheel(package, version).paths)})"
    path = source.source_dir(package, version) / (module.replace(".", "/") + ".py")
    params = _params(path, call.function)
    if params is None:
        return f"{who}: {module.replace('.', '/')}.py defines no {call.function}()"
    names = [n for n, _ in params]
    head = names[: len(call.positional)]
    if tuple(head) != call.positional:
        return (f"{who}: {call.function}({', '.join(head)}, ...) is not the ({', '.join(call.positional)}, ...) "
                "attnum's adapter passes by position: its signature changed")
    lacking = [k for k in call.keywords if k not in names]
    if lacking:
        return f"{who}: {call.function}() takes no {', '.join(lacking)} (attnum's adapter passes it)"
    known = {*call.positional, *call.keywords, *call.optional, *call.fills}
    unknown = [n for n, required in params if required and n not in known]
    if unknown:
        return (f"{who}: {call.function}() requires {', '.join(unknown)}, which attnum's adapter does not know "
                "how to pass: its signature changed")
    return ""


def keywords(fn, call: Call, **optional) -> dict:
    """The keyword arguments for the loaded ``fn``: ``optional`` where ``fn`` takes them, and ``call.fills``
    for the required ones it has."""
    have = inspect.signature(fn).parameters
    out = {k: v for k, v in optional.items() if k in have}
    out.update({k: v for k, v in call.fills.items() if k in have})
    return out


def feature_keywords(fn, kernel: str, **features: tuple[object, object]) -> dict:
    """The score-feature keywords for the loaded ``fn`` (``name=(value, off)``): each passed where ``fn`` takes
    it; where this version lacks one, left out when its value is ``off`` (the feature not asked for), else
    NotImplementedError naming it (the audit's ``unsupported``): dropping an asked-for feature would compute
    another attention than the one the caller judges."""
    have = inspect.signature(fn).parameters
    out = {}
    for name, (value, off) in features.items():
        if name in have:
            out[name] = value
        elif not (value is off or (value is None) == (off is None) and not hasattr(value, "shape") and value == off):
            raise NotImplementedError(f"{kernel} of this version takes no {name}")
    return out


def takes(fn, name: str) -> bool:
    """Whether the loaded ``fn`` has a parameter ``name``."""
    return name in inspect.signature(fn).parameters
