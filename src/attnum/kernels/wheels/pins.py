"""The pin table (``pins.toml`` beside this module): per package, the versions attnum fetches, each with its
wheel's name and the sha256 PyPI publishes for it, and the kernel files extracted from it with theirs.

The table is data shipped in the package and the only thing the cache is checked against
(:mod:`attnum.kernels.wheels.cache`): a wheel is used only under its pinned name and hash, and an extracted
file only while its bytes hash to the pinned sha256. Loaded once per process, validated as it loads (a
malformed table is a bug in attnum, not bad input: ``ValueError``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

_SHA = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class Wheel:
    """One version of a package: its wheel (``name``, ``sha256``, ``size`` in bytes) and ``files``
    (path inside the wheel, sha256) attnum extracts from it."""

    package: str
    version: str
    name: str
    sha256: str
    size: int
    files: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if not self.name.endswith(".whl") or "/" in self.name:
            raise ValueError(f"{self.package} {self.version}: wheel={self.name!r} must be a .whl file name")
        for what, sha in (("wheel", self.sha256), *self.files):
            if not _SHA.fullmatch(sha):
                raise ValueError(f"{self.package} {self.version}: {what} has sha256={sha!r}, not 64 hex digits")
        for path, _ in self.files:
            p = PurePosixPath(path)
            if p.is_absolute() or ".." in p.parts or not path.endswith(".py"):
                raise ValueError(f"{self.package} {self.version}: file {path!r} must be a relative .py path")
        if not self.files:
            raise ValueError(f"{self.package} {self.version}: no kernel file")

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.files)

    def tags(self) -> tuple[str, str, str]:
        """(python, abi, platform) tags of the wheel's file name (PEP 427; a build tag may precede them)."""
        py, abi, plat = self.name[:-4].split("-")[-3:]
        return py, abi, plat


@dataclass(frozen=True, kw_only=True)
class Package:
    """A package attnum fetches: its PyPI name ``dist``, import name, ``default`` version and ``versions``."""

    name: str
    dist: str
    import_name: str
    default: str
    versions: dict[str, Wheel]

    def __post_init__(self) -> None:
        if self.default not in self.versions:
            raise ValueError(f"{self.name}: default={self.default!r} is not among its versions {tuple(self.versions)}")
        norm = self.dist.replace("-", "_")
        for v, w in self.versions.items():
            if not w.name.startswith(f"{norm}-{v}-"):
                raise ValueError(f"{self.name} {v}: wheel {w.name!r} is not {norm}-{v}-...")


def _parse(text: str) -> dict[str, Package]:
    raw = tomllib.loads(text)
    out = {}
    for name, entry in raw.items():
        versions = {v: Wheel(package=name, version=v, name=w["wheel"], sha256=w["sha256"], size=int(w["size"]),
                             files=tuple(w["files"].items()))
                    for v, w in entry["versions"].items()}
        out[name] = Package(name=name, dist=entry.get("dist", name), import_name=entry.get("import", name),
                            default=entry["default"], versions=versions)
    return out


@functools.cache
def table() -> dict[str, Package]:
    """``{package: Package}`` from the shipped ``pins.toml``."""
    return _parse(resources.files(__package__).joinpath("pins.toml").read_text(encoding="utf-8"))
