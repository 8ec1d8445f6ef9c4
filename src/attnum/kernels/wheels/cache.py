"""The user cache of third-party kernel files: checked against the pin table on fetch and before every use.

A file in ``$ATTNUM_CACHE`` is only as trustworthy as whoever last wrote there, and its code runs (in the
kernel server's child). So attnum trusts nothing in the cache but the hashes of its pin table
(:mod:`attnum.kernels.wheels.pins`, shipped in the package):

- a downloaded wheel is used only under its exact pinned file name, and only when its sha256 is the one
  the registry publishes (a truncated download, a decoy zip, a tampered wheel: one line naming the file and
  the command that clears it); once its kernel files are extracted it is deleted;
- the kernel files are extracted into a fresh temporary folder (files created exclusively, never through a
  link), each checked against its pinned sha256 as it is written, and the folder is renamed into place, so a
  half-written or planted tree is never what is loaded; one extraction per tree at a time (an exclusive
  ``flock`` on ``src/.<tree>.lock``), and a rename that loses a race to another process's finished tree
  keeps that tree when it verifies;
- before every use each extracted file is hashed and compared with the table, and a symbolic link anywhere
  below the cache root, or a file where a folder belongs, is refused in one line, never followed.

Hashing is memoised per process by (path, inode, size, mtime): a process hashes a file once.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from attnum.errors import AttnumEnvironmentError

try:
    import fcntl
except ImportError:  # Windows: no flock; the rename below still never loses a verified tree
    fcntl = None  # type: ignore[assignment]

_CHUNK = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_VERIFIED: dict[tuple, str] = {}
_RACES = 8  # renames tried when other processes keep replacing the tree (never reached under flock)


def sha256_of(path: Path) -> str:
    """The sha256 of a regular file, read without following a symbolic link."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _hash_memo(path: Path, st: os.stat_result) -> str:
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = sha256_of(path)
    return _VERIFIED[key]


def refuse_links(root: Path, path: Path, fix: str) -> None:
    """AttnumEnvironmentError when ``path`` or a folder between ``root`` (the cache, which may itself be a
    link the user made) and it is a symbolic link, or when one of those folders is not a folder."""
    if root.exists() and not root.is_dir():
        raise AttnumEnvironmentError(f"attnum's cache {root} is not a folder (ATTNUM_CACHE, default "
                                     f"~/.cache/attnum): remove it or point ATTNUM_CACHE at a folder, then run `{fix}`")
    cur = root
    parts = path.relative_to(root).parts
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise AttnumEnvironmentError(f"{cur} is a symbolic link inside attnum's cache; attnum never follows "
                                         f"one: remove it (rm {cur}) and run `{fix}`")
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            raise AttnumEnvironmentError(f"{cur} is a file where attnum's cache keeps a folder: remove it "
                                         f"(rm {cur}) and run `{fix}`")


def ensure_dir(root: Path, path: Path, fix: str) -> None:
    """``path`` (inside ``root``) exists as a folder, made where missing; a link or a file on the way is one
    line naming it."""
    refuse_links(root, path, fix)
    if os.path.lexists(path) and not path.is_dir():
        raise AttnumEnvironmentError(f"{path} is a file where attnum's cache keeps a folder: remove it "
                                     f"(rm {path}) and run `{fix}`")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:  # a file appeared on the way since the check
        raise AttnumEnvironmentError(f"{exc.filename or path} is a file where attnum's cache keeps a folder: "
                                     f"remove it and run `{fix}`") from None
    refuse_links(root, path, fix)


def verify_wheel(root: Path, path: Path, sha256: str, fix: str) -> None:
    """The wheel at ``path`` is a regular file whose sha256 is ``sha256``, or one line saying what to do."""
    refuse_links(root, path, fix)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise AttnumEnvironmentError(f"{path} is missing (the pinned wheel the kernel files come from): "
                                     f"run `{fix}`") from None
    if not stat.S_ISREG(st.st_mode):
        raise AttnumEnvironmentError(f"{path} is not a regular file: remove it (rm -r {path}) and run `{fix}`")
    got = _hash_memo(path, st)
    if got != sha256:
        raise AttnumEnvironmentError(
            f"{path} has sha256 {got[:16]}..., not the pinned {sha256[:16]}... (truncated, tampered or not the "
            f"registry's wheel); attnum will not use it: remove it (rm {path}) and run `{fix}`")


@contextlib.contextmanager
def exclusive(root: Path, lock: Path, fix: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock`` (created without following a link) for the block."""
    refuse_links(root, lock, fix)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o644)
    except OSError as exc:
        raise AttnumEnvironmentError(f"{lock}: cannot open attnum's lock file ({exc.strerror or exc}); remove it "
                                     f"and run `{fix}`") from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def tree_problem(root: Path, files: tuple[tuple[str, str], ...], dest: Path, fix: str) -> str:
    """'' when every pinned file under ``dest`` is a regular file (no link on the way) whose sha256 is the
    table's; else why not (one line, with the command that clears it)."""
    try:
        refuse_links(root, dest, fix)
        for m, sha in files:
            path = dest / m
            refuse_links(root, path, fix)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return f"{path} is not a regular file: remove {dest} (rm -r {dest}) and run `{fix}`"
            if _hash_memo(path, st) != sha:
                return (f"{path} differs from the pinned file (sha256 not {sha[:16]}...: edited or planted); attnum "
                        f"will not run it: remove {dest} (rm -r {dest}) and run `{fix}`")
    except AttnumEnvironmentError as err:
        return str(err)
    except (FileNotFoundError, NotADirectoryError) as exc:
        return f"{exc.filename or dest} is missing: run `{fix}`"
    except OSError as exc:
        return f"{dest}: cannot check the kernel files ({type(exc).__name__}: {exc}); run `{fix}`"
    return ""


def _write_members(wheel: Path, files: tuple[tuple[str, str], ...], tmp: Path, fix: str) -> None:
    try:
        with zipfile.ZipFile(wheel) as z:
            for m, sha in files:
                try:
                    data = z.read(m)
                except KeyError:
                    raise AttnumEnvironmentError(f"{wheel.name} holds no {m} (the pin table names a kernel file this "
                                                 "version does not ship)") from None
                if hashlib.sha256(data).hexdigest() != sha:
                    raise AttnumEnvironmentError(f"{wheel.name}: {m} is not the pinned file (sha256 not "
                                                 f"{sha[:16]}...); attnum will not extract it")
                out = tmp / m
                out.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
    except (zipfile.BadZipFile, OSError) as exc:
        raise AttnumEnvironmentError(f"{wheel}: cannot extract the kernel files ({type(exc).__name__}: "
                                     f"{exc}); remove it (rm {wheel}) and run `{fix}`") from None


def _aside(dest: Path) -> None:
    """Move an existing ``dest`` (tree, file or link) out of the way and remove it. Another process may move or
    remove it between the look and the move: then it is already out of the way."""
    try:
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}-old-", dir=dest.parent))
            try:
                os.rename(dest, old / "tree")
            finally:
                shutil.rmtree(old, ignore_errors=True)
    except FileNotFoundError:
        pass


def extract(root: Path, wheel: Path, files: tuple[tuple[str, str], ...], dest: Path, fix: str) -> None:
    """``files`` of the (verified) ``wheel`` into ``dest``: written into a fresh temporary folder beside it,
    each file checked against its pinned sha256 and created exclusively, never through a link, then renamed
    into place (an old ``dest`` is moved aside and removed first). Safe against other processes doing the
    same: when ``dest`` was replaced by one of them in between, a tree of theirs that verifies is kept."""
    ensure_dir(root, dest.parent, fix)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        _write_members(wheel, files, tmp, fix)
        for _ in range(_RACES):
            _aside(dest)
            try:
                os.rename(tmp, dest)
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            if not tree_problem(root, files, dest, fix):
                return  # another process put a verified tree there first: keep it
        raise AttnumEnvironmentError(f"{dest}: other processes keep replacing the kernel files; run `{fix}` again")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
