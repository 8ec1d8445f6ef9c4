"""Transitional: attention names resolve in :mod:`attnum.kernels.registry`; nothing resolves here.

``resolve_attention`` only forwards to :func:`attnum.kernels.registry.require`. It stays while
``tests/test_backward.py`` imports it; delete this module when that test imports the registry.
"""

from __future__ import annotations

from collections.abc import Callable

from attnum.kernels.registry import require

__all__ = ["resolve_attention"]


def resolve_attention(spec, *, block_q: int | None = None, block_k: int | None = None) -> Callable:
    """``require(spec, block_q=..., block_k=...).fn``."""
    return require(spec, block_q=block_q, block_k=block_k).fn
