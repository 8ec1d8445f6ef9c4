"""What the real-kernel tests share: the pinned wheels fetched once into ~/.cache/attnum, or the test
skipped, saying why (no network, no index, no triton)."""

from __future__ import annotations

import importlib.util

import pytest

from attnum.kernels.wheels import source as wheels


def fetched_or_skip(*packages: str, triton: bool = True) -> None:
    """Skip unless Triton is installed (``triton``) and every package's kernel files can be loaded,
    fetching the pinned wheel of one that is missing."""
    if triton and importlib.util.find_spec("triton") is None:  # find_spec: triton must not be imported here
        pytest.skip("triton is not installed (pip install 'attnum[triton]')")
    for pkg in packages:
        if wheels.missing(pkg):
            try:
                wheels.fetch(pkg, quiet=True)
            except Exception as exc:  # noqa: BLE001 - no network / no index: skip, saying why
                pytest.skip(f"cannot fetch {pkg} {wheels.PINS[pkg]}: {exc}")
