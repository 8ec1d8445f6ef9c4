"""What the real-kernel tests share: the pinned wheels fetched once into ~/.cache/attnum, or the test
skipped, saying why (no network, no index, no triton). A test module that uses these helpers is marked
``network`` (tests/conftest.py): ``pytest -m network --collect-only -q`` counts them, ``-m "not network"``
leaves them out on a machine without an index."""

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
                pytest.skip(f"needs the network: cannot fetch {pkg} {wheels.PINS[pkg]}: {exc}")


# The user's cache as the suite found it: tests that point ATTNUM_CACHE at a temporary folder still fetch
# into (and copy from) this one, so a wheel is downloaded once per machine.
USER_CACHE = wheels.cache_dir()


def cached_wheel(package: str):
    """The path of ``package``'s pinned wheel in the user's cache, fetched there first when it is not
    (as the README says the tests do); skipped, saying "needs the network", only when it cannot be."""
    import os

    path = USER_CACHE / "wheels" / wheels.WHEELS[package][1]
    if not path.is_file():
        before = os.environ.get("ATTNUM_CACHE")
        os.environ["ATTNUM_CACHE"] = str(USER_CACHE)
        try:
            wheels.fetch(package, quiet=True)
        except Exception as exc:  # noqa: BLE001 - no network / no index: skip, saying why
            pytest.skip(f"needs the network: cannot fetch {package} {wheels.PINS[package]}: {exc}")
        finally:
            if before is None:
                os.environ.pop("ATTNUM_CACHE", None)
            else:
                os.environ["ATTNUM_CACHE"] = before
    if not path.is_file():
        pytest.skip(f"the cache keeps no {package} wheel after fetching it")
    return path
