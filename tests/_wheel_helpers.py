"""What the real-kernel tests share: the pinned kernel files fetched once into the cache ($ATTNUM_CACHE or
~/.cache/attnum), or the test skipped, saying why (no network, no index, no triton); and a pinned wheel's
bytes for the tests of the cache itself (downloaded once per session, checked against the pin table). A test
module that uses these helpers is marked ``network`` (tests/conftest.py): ``pytest -m network --collect-only
-q`` counts them, ``-m "not network"`` leaves them out on a machine without an index."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from attnum.kernels.wheels import source as wheels

_WHEELS: dict[tuple[str, str], Path] = {}


def fetched_or_skip(*packages: str, triton: bool = True) -> None:
    """Skip unless Triton is installed (``triton``) and every package's kernel files can be loaded,
    fetching those missing. A package may be ``name@version``."""
    if triton and importlib.util.find_spec("triton") is None:  # find_spec: triton must not be imported here
        pytest.skip("triton is not installed (pip install 'attnum[triton]')")
    for spec in packages:
        pkg, version = wheels.split(spec)
        if wheels.missing(pkg, version):
            try:
                wheels.fetch(pkg, version, quiet=True)
            except Exception as exc:  # noqa: BLE001 - no network / no index: skip, saying why
                pytest.skip(f"needs the network: cannot fetch {pkg} {wheels.version_of(pkg, version)}: {exc}")


def pinned_wheel(tmp_factory, package: str, version: str | None = None) -> Path:
    """The pinned wheel of ``package`` (``version``), pip-downloaded once per session into a folder of
    ``tmp_factory`` (pytest's ``tmp_path_factory``) and checked against the table's sha256; skips when the
    registry cannot be reached."""
    from attnum.kernels.wheels.cache import sha256_of

    w = wheels.wheel(package, version)
    key = (package, w.version)
    if key not in _WHEELS:
        where = tmp_factory.mktemp(f"wheel-{package}-{w.version}")
        run = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                              *wheels._pip_tags(w), f"{wheels.packages()[package].dist}=={w.version}", "-d",
                              str(where)], capture_output=True, text=True)
        path = where / w.name
        if run.returncode or not path.is_file():
            pytest.skip(f"needs the network: cannot download {w.name}: {(run.stderr or '').strip().splitlines()[-1:]}")
        assert sha256_of(path) == w.sha256, f"{w.name}: the registry's file is not the pinned one"
        _WHEELS[key] = path
    return _WHEELS[key]
