"""Third-party Triton kernels, from the installed package or from the kernel files of a pinned wheel.

SGLang's, vLLM's and SageAttention 1's Triton attention kernels, FlashInfer's Triton merges, ring-flash-attn's
merge and fla's attention are plain Python files inside their wheels. attnum runs them from the installed
package when there is one; otherwise ``attnum kernels fetch PACKAGE[@VERSION]`` downloads that version's
wheel once, without dependencies (``pip download --no-deps``), into ``$ATTNUM_CACHE`` (default
``~/.cache/attnum``), extracts only the kernel files the pin table names (:mod:`attnum.kernels.wheels.pins`)
into ``src/<package>-<version>`` and deletes the wheel; later runs, CI included, reuse the files after
checking each one's sha256 against the table. Nothing of theirs is committed here. A package's ``default``
version is what a plain target (``vllm-unified``) runs; ``vllm-unified@0.30.0`` names another one.

A kernel file is imported by path under its own module name, with small stand-ins for the heavy modules
it imports (:mod:`attnum.kernels.wheels.stand_ins`), installed only when the real package is absent. Package
``__init__`` files are never run (flashinfer's imports its JIT and CUDA extensions, ring_flash_attn's imports
flash_attn): only the listed files load. One process holds one version of a package (the module names are
the same in every version): asking a process that loaded vllm 0.30.0's files for 0.31.0's is refused in one
line, never answered with the first; ``attnum audit`` runs each target in a fresh kernel server. With
``TRITON_INTERPRET=1`` (CPU) the kernels run in Triton's interpreter; see :mod:`attnum.kernels.triton.faithful`.
"""

from __future__ import annotations

import errno
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from attnum.errors import AttnumEnvironmentError, bad_value
from attnum.kernels.wheels import cache as wheel_cache
from attnum.kernels.wheels.pins import Package, Wheel, table
from attnum.kernels.wheels.stand_ins import _load_file, _stand_ins, importable

_CHOSEN: dict[str, str] = {}  # the version this process runs, per package (default: the table's)
_LOADED: dict[str, str] = {}  # the version whose modules this process imported, per package


def packages() -> dict[str, Package]:
    return table()


def __getattr__(name: str):
    # The single-version names of attnum <= 0.1 (the default pins), computed from the table.
    t = table()
    if name == "PINS":
        return {p: pkg.default for p, pkg in t.items()}
    if name == "WHEELS":
        return {p: (pkg.default, pkg.versions[pkg.default].name, pkg.versions[pkg.default].sha256)
                for p, pkg in t.items()}
    if name == "FILES":
        return {p: pkg.versions[pkg.default].paths for p, pkg in t.items()}
    if name == "DISTS":
        return {p: pkg.dist for p, pkg in t.items() if pkg.dist != p}
    if name == "IMPORTS":
        return {p: pkg.import_name for p, pkg in t.items() if pkg.import_name != p}
    raise AttributeError(name)


def cache_dir() -> Path:
    return Path(os.environ.get("ATTNUM_CACHE") or Path.home() / ".cache" / "attnum")


def _check(package: str) -> str:
    if package not in table():
        raise bad_value("package", package, f"one of {', '.join(table())}")
    return package


def split(spec: str) -> tuple[str, str | None]:
    """``"vllm@0.30.0"`` -> ("vllm", "0.30.0"); ``"vllm"`` -> ("vllm", None); the package checked."""
    package, at, version = spec.strip().partition("@")
    _check(package)
    if at and not version:
        raise bad_value("version", spec, f"PACKAGE@VERSION with a version ({', '.join(table()[package].versions)})")
    return package, (version or None)


def version_of(package: str, version: str | None = None) -> str:
    """``version`` checked against the table, else the one chosen for this process, else the default."""
    pkg = table()[_check(package)]
    v = version or _CHOSEN.get(package) or pkg.default
    if v not in pkg.versions:
        raise bad_value("version", f"{package}@{v}", f"a version of {package} attnum has pinned: "
                        f"{', '.join(pkg.versions)} (each with its wheel's sha256 in attnum/kernels/wheels/pins.toml)")
    return v


def wheel(package: str, version: str | None = None) -> Wheel:
    return table()[_check(package)].versions[version_of(package, version)]


def choose(package: str, version: str | None) -> str:
    """Make ``version`` (None: the default) the one this process runs for ``package``; refused in one line
    when the process already imported another version's files."""
    v = version_of(package, version or table()[_check(package)].default)
    loaded = _LOADED.get(package)
    if loaded is not None and loaded != v:
        raise AttnumEnvironmentError(
            f"{package} {v} cannot run in this process: it already imported {package} {loaded}'s kernel files "
            "(one version of a package per process; attnum audit runs each target in its own kernel server, "
            "--no-isolate runs one version per command)")
    _CHOSEN[package] = v
    return v


def source_dir(package: str, version: str | None = None) -> Path:
    """Where the extracted kernel files of a version live (``<cache>/src/<package>-<version>``)."""
    return cache_dir() / "src" / f"{package}-{version_of(package, version)}"


def installed(package: str) -> bool:
    return importable(table()[_check(package)].import_name)  # our own stand-ins do not count


def installed_version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(table()[_check(package)].dist)
    except metadata.PackageNotFoundError:
        return None


def _fix(package: str, version: str) -> str:
    return f"attnum kernels fetch {package}" + ("" if version == table()[package].default else f"@{version}")


def wheel_path(package: str, version: str | None = None) -> Path:
    """The wheel's one accepted path in the cache (no glob: a decoy name is never picked)."""
    return cache_dir() / "wheels" / wheel(package, version).name


def _problem(package: str, version: str) -> str:
    """'' when the version's extracted kernel files are the table's bytes, else why not."""
    w = wheel(package, version)
    return wheel_cache.tree_problem(cache_dir(), w.files, source_dir(package, version), _fix(package, version))


def _installed_problem(package: str, version: str | None) -> str:
    have = installed_version(package)
    if version is not None and have is not None and have != version:
        return (f"{package} {have} is installed, and attnum runs an installed package's own kernels: "
                f"{package}@{version} needs an environment without it (pip uninstall {table()[package].dist})")
    return ""


def missing(package: str, version: str | None = None) -> str:
    """'' when the kernel files of ``package`` (``version``; None: this process's choice) can be loaded here,
    else why not (one line). Fetched files are checked against the pin table's sha256 on every call."""
    if installed(package):
        return _installed_problem(package, version)
    v = version_of(package, version)
    w, src = wheel(package, v), source_dir(package, v)
    if not os.path.lexists(src):
        return (f"{package} {v} is neither installed nor fetched: run `{_fix(package, v)}` (pip download --no-deps "
                f"{table()[package].dist}=={v}, {w.size / 1e6:.3g} MB, into {cache_dir()})")
    return _problem(package, v)


def _pip_tags(w: Wheel) -> list[str]:
    """pip's flags that select exactly this wheel's tags (a platform wheel is fetched on any machine: its
    kernel files are plain Python)."""
    py, abi, plat = w.tags()
    if plat == "any":
        return []
    flags = [a for p in plat.split(".") for a in ("--platform", p)]
    if py.startswith("cp") and py[2:].isdigit() and abi != "abi3":  # abi3: this interpreter qualifies
        flags += ["--implementation", "cp", "--python-version", f"{py[2]}.{py[3:]}", "--abi", abi]
    return flags


def _download(package: str, w: Wheel, wheels: Path, quiet: bool) -> None:
    """pip download of the wheel into a fresh folder beside ``wheels``; the pinned file, verified, renamed
    into place."""
    dist = table()[package].dist
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels))
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *_pip_tags(w),
               "--disable-pip-version-check", f"{dist}=={w.version}", "-d", str(tmp)]
        run = subprocess.run(cmd, capture_output=quiet, text=True)
        got = tmp / w.name
        if run.returncode or not got.is_file() or got.is_symlink():
            tail = (run.stderr or "").strip().splitlines()[-1:] if quiet else []
            found = ", ".join(p.name for p in tmp.iterdir()) if tmp.is_dir() else ""
            why = tail[0] if tail else (f"it gave {found}, not the pinned file" if found and not run.returncode else "")
            raise AttnumEnvironmentError(f"pip download of {dist}=={w.version} ({w.name}) failed"
                                         + (f": {why}" if why else ""))
        wheel_cache.verify_wheel(wheels, got, w.sha256, _fix(package, w.version))
        os.replace(got, wheels / w.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch(package: str, version: str | None = None, *, quiet: bool = False) -> Path:
    """Download the version's wheel (no dependencies) unless its files are already here, check its sha256,
    extract the pinned kernel files (each checked against its sha256) into a fresh folder renamed into place,
    and delete the wheel; returns the folder. A wheel whose hash is wrong (a truncated download, a decoy) is
    refused with one line naming the file and the command that clears it. Concurrent fetches of one version
    extract once (an exclusive lock), and none of them fails for the others."""
    v = version_of(package, version)
    dest, w, root, fix = source_dir(package, v), wheel(package, v), cache_dir(), _fix(package, v)
    if not _problem(package, v):
        return dest
    try:
        return _fetch(package, v, dest, w, root, fix, quiet)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise AttnumEnvironmentError(f"{exc.filename or root}: attnum's cache cannot be written here "
                                     f"({exc.strerror}); point ATTNUM_CACHE at a folder you can write to (default "
                                     f"~/.cache/attnum), then run `{fix}`") from None


def _fetch(package: str, v: str, dest: Path, w: Wheel, root: Path, fix: str, quiet: bool) -> Path:
    wheel_cache.ensure_dir(root, root / "src", fix)
    wheels = root / "wheels"
    wheel_cache.ensure_dir(root, wheels, fix)
    with wheel_cache.exclusive(root, root / "src" / f".{dest.name}.lock", fix):
        if not _problem(package, v):  # another process fetched it while this one waited
            return dest
        target = wheels / w.name
        if not os.path.lexists(target):
            _download(package, w, wheels, quiet)
        wheel_cache.verify_wheel(root, target, w.sha256, fix)
        wheel_cache.extract(root, target, w.files, dest, fix)
        why = _problem(package, v)
        if why:
            raise AttnumEnvironmentError(why)
        target.unlink()  # the files are what is kept and checked; the wheel has served
    return dest


# -- loading ---------------------------------------------------------------------------------------


def module_named(package: str, leaf: str, version: str | None = None) -> str | None:
    """The dotted module name of the version's kernel file ``<leaf>.py`` (its folder differs between
    versions), or None when that version ships none."""
    if installed(package):
        return None
    hits = [p for p in wheel(package, version).paths if p.rsplit("/", 1)[-1] == f"{leaf}.py"]
    return hits[0][:-3].replace("/", ".") if hits else None


def load(package: str, module: str, version: str | None = None):
    """The kernel module ``module`` (dotted, e.g. ``vllm.v1.attention.ops.triton_merge_attn_states``):
    the installed one, else the fetched file of ``version`` (None: this process's choice) with stand-ins
    for its heavy imports."""
    v = choose(package, version or _CHOSEN.get(package))
    if installed(package):
        why = _installed_problem(package, version)
        if why:
            raise AttnumEnvironmentError(why)
        _LOADED[package] = installed_version(package) or v
        return importlib.import_module(module)
    if module in sys.modules and _LOADED.get(package) == v:
        return sys.modules[module]
    why = missing(package, v)  # the pinned hashes, checked again before this process runs the files
    if why:
        raise (NotImplementedError if "neither installed nor fetched" in why else AttnumEnvironmentError)(why)
    root, w = source_dir(package, v), wheel(package, v)
    if f"{module.replace('.', '/')}.py" not in w.paths:
        raise NotImplementedError(f"{package} {v} ships no {module.replace('.', '/')}.py (its kernel files: "
                                  f"{', '.join(w.paths)})")
    _LOADED[package] = v
    _stand_ins(package, root)
    return _load_with_deps(module, root, {f[:-3].replace("/", "."): root / f for f in w.paths}, ())


def _imports_of(module: str, path: Path) -> list[str]:
    """The modules ``path``'s source imports (absolute, and relative resolved against ``module``)."""
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: -node.level]
                base = ".".join([*anchor, *([base] if base else [])])
            out += [base, *(f"{base}.{a.name}" for a in node.names)]
    return out


def _load_with_deps(module: str, root: Path, listed: dict[str, Path], stack: tuple[str, ...]):
    """Load ``module`` after the listed kernel files it imports (vLLM's unified attention imports its
    helpers, SGLang's extend its decode and score_mod): only files of the pin table, never another file of
    the tree, so a file planted beside them is never imported."""
    for dep in _imports_of(module, listed[module]):
        if dep in listed and dep != module and dep not in stack and dep not in sys.modules:
            _load_with_deps(dep, root, listed, (*stack, module))
    return _load_file(module, listed[module])
