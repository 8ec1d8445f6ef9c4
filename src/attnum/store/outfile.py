"""Output files (``export -o``, ``report.html``, figures, ``audit --html``): checked, then written whole.

:func:`check_output` refuses, before any work, a path that can never be an output: an empty name, a
folder, a file in a folder that does not exist, and attnum's own bookkeeping files (a results store
``attnum.sqlite``, its ``-wal``/``-shm``/``-journal`` and the folder lock ``attnum.lock``, by name or
by being the same file). ``attnum export out -o out/attnum.sqlite`` once replaced the store with CSV.

:func:`write_atomic` writes to a temporary file in the destination's folder and renames it into
place (``os.replace``, atomic on POSIX): a reader, or a ``kill -9`` in mid-write, sees the old file
or the new one, never a truncated one. A destination that is a symbolic link to a regular file is
replaced by the new file; the file the link pointed to is never opened. A destination that is not a
regular file (``/dev/null``, ``/dev/full``, ``/dev/stdout``, a FIFO) is written in place: there is no
file to replace, and renaming over it would replace the device node itself.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from attnum.errors import AttnumInputError

DB_NAME = "attnum.sqlite"
LOCK_NAME = "attnum.lock"
OWN_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal", LOCK_NAME)


def is_own_file(path: str | Path) -> bool:
    """True for a store, its WAL/SHM/journal or a folder lock (by name, or the same file as one)."""
    p = Path(path)
    if p.name in OWN_FILES:
        return True
    with contextlib.suppress(OSError):
        if p.exists():
            st = p.stat()
            for name in OWN_FILES:
                other = p.parent / name
                if other.exists() and os.path.samestat(st, other.stat()):
                    return True
    return False


def check_output(path: str | Path | None, flag: str) -> Path:
    """``path`` as an output file, or one line naming ``flag``, the value and what is allowed."""
    if path is None or not str(path).strip():
        raise AttnumInputError(f"{flag}={str(path or '')!r} is not allowed; expected a file name")
    p = Path(path)
    if is_own_file(p):
        raise AttnumInputError(f"{flag}={str(p)!r} is not allowed; it is attnum's own bookkeeping file "
                               f"({', '.join(OWN_FILES)}), never an output: name another file")
    if p.is_dir():
        raise AttnumInputError(f"{flag}={str(p)!r} is a folder; expected a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise AttnumInputError(f"{flag}={str(p)!r} is not allowed; the folder {str(parent)!r} does not exist")
    return p


def write_atomic(path: str | Path, data: str | bytes | Callable[[Path], None], *, encoding: str = "utf-8") -> Path:
    """Write ``data`` (text, bytes, or a function that writes the file it is given) to ``path`` whole.

    The temporary file is ``.NAME.XXXX.tmp`` beside ``path``; it is removed if writing fails."""
    p = Path(path)
    try:
        special = not stat.S_ISREG(os.stat(p).st_mode)  # through links: /dev/stdout -> /proc/self/fd/1
    except OSError:
        special = False  # absent (or a dangling link): a new file
    if special:
        try:
            if callable(data):
                data(p)
            else:
                with open(p, "wb") as fh:
                    fh.write(data.encode(encoding) if isinstance(data, str) else data)
        except OSError as err:
            err.filename = err.filename or str(p)
            raise
        return p
    parent = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as err:
        err.filename = str(p)
        raise
    tmp_path = Path(tmp)
    try:
        if callable(data):
            os.close(fd)
            fd = -1
            data(tmp_path)
        else:
            with os.fdopen(fd, "wb") as fh:
                fd = -1
                fh.write(data.encode(encoding) if isinstance(data, str) else data)
                fh.flush()
                os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp's 0600 would make a shared report unreadable
        os.replace(tmp_path, p)
    except BaseException as err:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        if isinstance(err, OSError) and err.filename in (None, tmp):
            err.filename = str(p)  # the one-line error names the file the user asked for, not the temp
        raise
    return p


def save_figure(fig, path: str | Path, **kwargs) -> Path:
    """``fig.savefig`` through :func:`write_atomic` (the format from the name's suffix)."""
    fmt = Path(path).suffix.lstrip(".") or "png"
    return write_atomic(path, lambda tmp: fig.savefig(tmp, format=fmt, **kwargs))
