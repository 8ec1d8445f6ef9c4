"""Which files ``attnum scan`` reads, and reading them without being fooled or blocked.

Skip rules (``.git``, ``.venv``, ``node_modules``, caches, ...) apply only to folders *below* a root
named; a root is read whatever its own name or the names above it. Anything that cannot be read is an
error naming the path and the reason, never a silently smaller scan: a missing path, a FIFO/socket/
device, permission denied, a folder that cannot be listed, a symbolic-link loop, a broken link named
like a source file.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from attnum.errors import AttnumEnvironmentError, AttnumInputError, bad_value

PY_SUFFIXES = (".py", ".pyi")
C_SUFFIXES = (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hip", ".metal")
SOURCE_SUFFIXES = PY_SUFFIXES + C_SUFFIXES
CACHE_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})  # never hold sources
SKIP_DIRS = CACHE_DIRS | {".git", ".hg", ".svn", "node_modules", ".venv", "venv", ".tox", ".nox"}


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "not a regular file or folder"


def _unreadable(path: str | Path, what: str, err: OSError) -> AttnumEnvironmentError:
    """One line naming the path, the reason and what to do."""
    if err.errno == errno.ELOOP:
        why, todo = "a symbolic-link loop", "fix or remove the link"
    elif err.errno in (errno.EACCES, errno.EPERM):
        why, todo = "permission denied", "make it readable or leave it out of the scan"
    elif err.errno == errno.ENOENT:
        why, todo = "a broken symbolic link", "fix or remove the link"
    else:
        why, todo = err.strerror or type(err).__name__, "check the path and the disk"
    return AttnumEnvironmentError(f"cannot {what} {str(path)!r}: {why}; {todo}")


def iter_sources(paths: Iterable[str | Path], skipped: list[str] | None = None) -> Iterator[Path]:
    """Source files under the given files/folders, depth first in name order.

    Folders named in SKIP_DIRS are skipped only below a root (recorded in ``skipped``); a root is read
    whatever it or its parents are called. Symbolic links are followed; a folder reached twice (a link
    back up the tree) is read once. Raises on anything that cannot be read."""
    skipped = [] if skipped is None else skipped
    for root in paths:
        name = str(root)
        if not name:
            raise bad_value("path", name, "a file or folder")
        try:
            st = os.stat(root)
        except FileNotFoundError:
            if os.path.islink(root):
                raise _unreadable(root, "read", FileNotFoundError(errno.ENOENT, "")) from None
            raise AttnumInputError(f"path={name!r} does not exist") from None
        except OSError as err:
            raise _unreadable(root, "read", err) from None
        if stat.S_ISREG(st.st_mode):
            if not name.endswith(SOURCE_SUFFIXES):
                raise AttnumInputError(f"path={name!r} is not a source file; attnum scan reads "
                                       f"{' '.join(SOURCE_SUFFIXES)}")
            yield Path(root)
        elif stat.S_ISDIR(st.st_mode):
            yield from _walk(Path(root), skipped)
        else:
            raise AttnumInputError(f"path={name!r} is {_kind(st.st_mode)}; attnum scan reads source files and folders")


def _walk(root: Path, skipped: list[str]) -> Iterator[Path]:
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Path, bool]] = [(root, True)]
    while stack:
        path, is_dir = stack.pop()
        if not is_dir:
            yield path
            continue
        try:
            st = os.stat(path)
            if (st.st_dev, st.st_ino) in seen:
                skipped.append(f"{path} (a link to a folder already scanned)")
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            raise _unreadable(path, "list folder", err) from None
        children = []
        for entry in entries:
            child, source = Path(entry.path), entry.name.endswith(SOURCE_SUFFIXES)
            try:
                mode = os.stat(entry.path).st_mode
            except FileNotFoundError as err:  # a dangling link (or a file gone since the listing)
                if source:
                    raise _unreadable(child, "read", err) from None
                skipped.append(f"{child} (a broken symbolic link)")
                continue
            except OSError as err:
                raise _unreadable(child, "read", err) from None
            if stat.S_ISDIR(mode):
                if entry.name in SKIP_DIRS:
                    if entry.name not in CACHE_DIRS:  # a cache holds no source: not worth a line
                        skipped.append(f"{child} (a {entry.name} folder)")
                else:
                    children.append((child, True))
            elif source:
                if not stat.S_ISREG(mode):
                    raise AttnumInputError(f"path={str(child)!r} is {_kind(mode)}, not a source file; "
                                           "remove it or scan around it")
                children.append((child, False))
        stack.extend(reversed(children))


def read_source(path: str | Path) -> str:
    """The file's text (undecodable bytes become U+FFFD), refusing anything but a regular file.

    Opened non-blocking, then checked with fstat, so a FIFO that appears under a source name is refused,
    never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise _unreadable(path, "read", err) from None
    with os.fdopen(fd, "rb") as fh:
        try:
            mode = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise AttnumInputError(f"path={str(path)!r} is {_kind(mode)}, not a source file")
            data = fh.read()
        except OSError as err:
            raise _unreadable(path, "read", err) from None
    return data.decode("utf-8", errors="replace")


def package_paths(name: str) -> list[Path]:
    """Folders (or the file) of an installed package."""
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise bad_value("package", name, "an installed package name such as transformers or flash_attn")
    try:
        spec = importlib.util.find_spec(name)
    except Exception as err:  # noqa: BLE001 - finding a submodule imports its parents, which may raise anything
        raise AttnumInputError(f"package={name!r} could not be located: {type(err).__name__}: "
                               f"{(str(err).splitlines() or [''])[0]}") from None
    if spec is None:
        raise AttnumInputError(f"package={name!r} is not installed for {sys.executable}; install it, or pass "
                               "its folder as PATH")
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    if spec.origin and os.path.isabs(spec.origin):
        return [Path(spec.origin)]
    raise AttnumInputError(f"package={name!r} is {spec.origin or 'not backed by files'}; it has no source files to scan")
