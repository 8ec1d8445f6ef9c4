"""The user cache of pinned third-party wheels: checked by sha256 on fetch and before every use.

A file in ``$ATTNUM_CACHE`` is only as trustworthy as whoever last wrote there, and its code runs (in the
kernel server's child). So attnum trusts nothing in the cache but the bytes its pin table names
(:data:`attnum.kernels.wheels.source.WHEELS`, the registry's published sha256 of each wheel):

- a wheel is used only under its exact pinned file name, and only when its sha256 matches (a truncated
  download, a decoy zip, a tampered wheel: one line naming the file and the command that clears it);
- the kernel files are extracted into a fresh temporary folder (files created exclusively, never through a
  link) that is then renamed into place, so a half-written or planted tree is never what is loaded;
- before every use the extracted files are compared byte for byte with the verified wheel's members, and a
  symbolic link anywhere below the cache root is refused, never followed.

Verification is memoised per process by (path, inode, size, mtime): a process hashes a wheel once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

from attnum.errors import AttnumEnvironmentError

_CHUNK = 1 << 20
_VERIFIED: dict[tuple, str] = {}


def sha256_of(path: Path) -> str:
    """The sha256 of a regular file, read without following a symbolic link."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def refuse_links(root: Path, path: Path, fix: str) -> None:
    """AttnumEnvironmentError when ``path`` or a folder between ``root`` (the cache, which may itself be a
    link the user made) and it is a symbolic link."""
    cur = root
    for part in path.relative_to(root).parts:
        cur = cur / part
        if cur.is_symlink():
            raise AttnumEnvironmentError(f"{cur} is a symbolic link inside attnum's cache; attnum never follows "
                                         f"one: remove it (rm {cur}) and run `{fix}`")


def verify_wheel(root: Path, path: Path, sha256: str, fix: str) -> None:
    """The wheel at ``path`` is a regular file whose sha256 is ``sha256``, or one line saying what to do."""
    refuse_links(root, path, fix)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise AttnumEnvironmentError(f"{path} is missing (the pinned wheel the kernel files come from): "
                                     f"run `{fix}`") from None
    if not stat.S_ISREG(st.st_mode):
        raise AttnumEnvironmentError(f"{path} is not a regular file: remove it (rm -r {path}) and run `{fix}`")
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if _VERIFIED.get(key) == sha256:
        return
    got = sha256_of(path)
    if got != sha256:
        raise AttnumEnvironmentError(
            f"{path} has sha256 {got[:16]}..., not the pinned {sha256[:16]}... (truncated, tampered or not the "
            f"registry's wheel); attnum will not use it: remove it (rm {path}) and run `{fix}`")
    _VERIFIED[key] = sha256


def extract(root: Path, wheel: Path, members: tuple[str, ...], dest: Path, fix: str) -> None:
    """``members`` of the (verified) ``wheel`` into ``dest``: written into a fresh temporary folder beside
    it, each file created exclusively and never through a link, then renamed into place (an old ``dest``
    is moved aside and removed first)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(root, dest.parent, fix)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        try:
            with zipfile.ZipFile(wheel) as z:
                for m in members:
                    data = z.read(m)
                    out = tmp / m
                    out.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise AttnumEnvironmentError(f"{wheel}: cannot extract the kernel files ({type(exc).__name__}: "
                                         f"{exc}); remove it (rm {wheel}) and run `{fix}`") from None
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}-old-", dir=dest.parent))
            os.rename(dest, old / "tree")
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def tree_problem(root: Path, wheel: Path, members: tuple[str, ...], dest: Path, fix: str) -> str:
    """'' when every member under ``dest`` is a regular file (no link on the way) holding exactly the
    verified wheel's bytes; else why not (one line, with the command that clears it)."""
    key = ("tree", str(dest), str(wheel))
    try:
        refuse_links(root, dest, fix)
        sig = []
        with zipfile.ZipFile(wheel) as z:
            for m in members:
                path = dest / m
                refuse_links(root, path, fix)
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    return f"{path} is not a regular file: remove {dest} (rm -r {dest}) and run `{fix}`"
                sig.append((st.st_ino, st.st_size, st.st_mtime_ns))
                if _VERIFIED.get((*key, m)) == sig[-1]:
                    continue
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                with os.fdopen(fd, "rb") as f:
                    if f.read() != z.read(m):
                        return (f"{path} differs from the pinned wheel's file (edited or planted); attnum will not "
                                f"run it: remove {dest} (rm -r {dest}) and run `{fix}`")
                _VERIFIED[(*key, m)] = sig[-1]
    except AttnumEnvironmentError as err:
        return str(err)
    except FileNotFoundError as exc:
        return f"{exc.filename or dest} is missing: run `{fix}`"
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        return f"{dest}: cannot check the kernel files ({type(exc).__name__}: {exc}); run `{fix}`"
    return ""
