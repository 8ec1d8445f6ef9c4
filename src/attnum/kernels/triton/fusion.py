"""Triton's FP-fusion switch: whether a kernel's fp32 ``a * b + c`` compiles to one ``fma``.

Read without importing triton when it is not imported yet (importing it before ``TRITON_INTERPRET=1``
would compile its library), and without the warning Triton 3.9 prints when the default is taken.
"""

from __future__ import annotations


def fp_fusion_default() -> bool:
    """Whether the installed Triton compiles a kernel launched without ``enable_fp_fusion=`` with FP
    fusion (LLVM contracts ``fmul`` + ``fadd`` into ``fma``; ptxas runs without ``--fmad=false``). Triton's
    own rule: off when ``TRITON_FORCE_DISABLE_FP_FUSION`` is true, else ``TRITON_DEFAULT_FP_FUSION``,
    whose default is on through Triton 3.9 (3.9 warns it becomes off in 3.10). Read from Triton's knobs
    when triton is imported already (they may be set in code), else from the environment and the
    installed version: importing triton here, before ``TRITON_INTERPRET=1``, would compile its library."""
    import sys

    knobs = getattr(sys.modules.get("triton"), "knobs", None)
    lang = getattr(knobs, "language", None)
    if lang is not None and hasattr(lang, "default_fp_fusion"):
        return not_forced_off() and bool(lang.default_fp_fusion)
    return not_forced_off() and _env_bool("TRITON_DEFAULT_FP_FUSION", _version_default())


def not_forced_off() -> bool:
    """Not ``TRITON_FORCE_DISABLE_FP_FUSION`` (Triton 3.9 and later; older ones have no such switch)."""
    import sys

    lang = getattr(getattr(sys.modules.get("triton"), "knobs", None), "language", None)
    if lang is not None and hasattr(lang, "force_disable_fp_fusion"):
        return not lang.force_disable_fp_fusion
    if lang is not None or _version() < (3, 9):  # Triton 3.8 and older: no such switch
        return True
    return not _env_bool("TRITON_FORCE_DISABLE_FP_FUSION", False)


def _env_bool(key: str, default: bool) -> bool:
    """Triton's reading of a boolean variable: on/true/1, off/false/0 (any case), else the default."""
    import os

    value = os.environ.get(key, "").strip().lower()
    return True if value in ("on", "true", "1") else False if value in ("off", "false", "0") else default


def _version_default() -> bool:
    return _version() < (3, 10)


def _version() -> tuple[int, int]:
    """The installed Triton's (major, minor), without importing it; (3, 9) when unknown."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(x) for x in version("triton").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return (3, 9)
    return (major, minor)
