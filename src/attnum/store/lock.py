"""One writer per results folder: ``DIR/attnum.lock``.

The lock is an exclusive ``flock`` on the file, held while a store is open for writing. The kernel
drops it when its holder exits, however it exits (SIGKILL included), so a lock left by a dead
process is simply taken over. The file's text says who holds it (pid, host, process start time,
command, since when), for the one-line refusal a second writer gets. Where ``flock`` is missing
or not supported (Windows, some network filesystems), the recorded pid decides: a holder that is
still running refuses, a gone one is taken over.

The lock file is attnum's own: it is opened without following links (``O_NOFOLLOW``), and a lock
path that is a symbolic link, a hard link to another file or not a regular file is refused in one
line (a planted ``attnum.lock -> precious.txt`` must never be truncated). On release the holder
unlinks the file while it still holds the lock, so a finished or rejected command leaves nothing
behind; a process that locked the unlinked file in that instant sees that the path no longer names
its file and starts again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

from attnum.errors import AttnumEnvironmentError
from attnum.sandbox.processes import is_running, this_process

LOCK_NAME = "attnum.lock"

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


class FolderLock:
    """An acquired lock on a results folder; :meth:`release` (or process exit) frees it."""

    def __init__(self, folder: Path, command: str | None = None) -> None:
        self.path = folder / LOCK_NAME
        self._fd: int | None = None
        holder = {**this_process(), "command": command or " ".join(["attnum", *sys.argv[1:]]),
                  "since": time.time()}
        for _attempt in range(20):
            fd = self._open()
            try:
                if not self._flock(fd):
                    raise AttnumEnvironmentError(f"{folder} is in use by {describe(read_holder(self.path))}; "
                                                 "wait for it to finish, stop it, or use another --out")
                if not self._still_ours(fd):
                    os.close(fd)  # the holder unlinked it as we locked it: lock the new file
                    continue
                held = read_holder(self.path) if fcntl is None or self._unsupported else None
                if held and is_running(held.get("pid"), held.get("host"), held.get("proc_start")):
                    raise AttnumEnvironmentError(f"{folder} is in use by {describe(held)}; "
                                                 "wait for it to finish, stop it, or use another --out")
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(holder).encode(), 0)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            return
        raise AttnumEnvironmentError(f"{self.path}: the lock file keeps changing under this process; "
                                     "another program is replacing it: stop it, or use another --out")

    def _open(self) -> int:
        """The lock file, created if absent, never through a link; refused unless a plain file."""
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
            | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP or os.path.islink(self.path):
                raise AttnumEnvironmentError(
                    f"{self.path}: the lock file is a symbolic link (to {os.readlink(self.path)!r}); attnum "
                    "never writes through it: remove the link, or use another --out") from None
            raise AttnumEnvironmentError(
                f"{self.path}: cannot create the lock file of this results folder ({err.strerror}); "
                "use a folder you can write to") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a hard link ({st.st_nlink} names)"
            raise AttnumEnvironmentError(f"{self.path}: the lock file is {what}; attnum never writes "
                                         "through it: remove it, or use another --out")
        return fd

    def _still_ours(self, fd: int) -> bool:
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        mine = os.fstat(fd)
        return (now.st_ino, now.st_dev) == (mine.st_ino, mine.st_dev)

    _unsupported = False

    def _flock(self, fd: int) -> bool:
        """True when this process now holds the lock (or flock is unavailable: the pid decides)."""
        if fcntl is None:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            self._unsupported = True  # ENOLCK, EOPNOTSUPP...: fall back to the recorded pid
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                if self._still_ours(fd):
                    os.unlink(self.path)  # while still held: a rejected or finished run leaves nothing
                else:
                    os.ftruncate(fd, 0)  # nobody holds it now
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            os.close(fd)  # closing drops the flock


def read_holder(path: Path) -> dict[str, Any] | None:
    """The holder a lock file names (None if unreadable, a link, or not attnum's JSON object)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            text = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        held = json.loads(text or b"null")
    except (OSError, ValueError):
        return None
    return held if isinstance(held, dict) else None


def describe(holder: dict[str, Any] | None) -> str:
    """``attnum sweep ... (pid 123 on host, since 2026-01-01 12:00:00 UTC)``, one line."""
    if not holder:
        return "another attnum process (it has not yet said which)"
    since = holder.get("since")
    when = (dt.datetime.fromtimestamp(since, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            if isinstance(since, (int, float)) else "an unknown time")
    return f"'{str(holder.get('command') or '?')[:200]}' (pid {holder.get('pid')} on {holder.get('host')}, since {when})"
