"""One writer per results folder: ``DIR/attnum.lock``.

The lock is an exclusive ``flock`` on the file, held while a store is open for writing. The kernel
drops it when its holder exits, however it exits (SIGKILL included), so a lock left by a dead
process is simply taken over. The file's text says who holds it (pid, host, process start time,
command, since when), for the one-line refusal a second writer gets. Where ``flock`` is missing
or not supported (Windows, some network filesystems), the recorded pid decides: a holder that is
still running refuses, a gone one is taken over.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from attnum.errors import AttnumEnvironmentError
from attnum.processes import is_running, this_process

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
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise AttnumEnvironmentError(
                f"{self.path}: cannot create the lock file of this results folder ({err.strerror}); "
                "use a folder you can write to") from None
        try:
            if not self._flock(fd):
                raise AttnumEnvironmentError(f"{folder} is in use by {describe(read_holder(self.path))}; "
                                             "wait for it to finish, stop it, or use another --out")
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
                os.ftruncate(fd, 0)  # nobody holds it now
            except OSError:
                pass
            os.close(fd)  # closing drops the flock


def read_holder(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None


def describe(holder: dict[str, Any] | None) -> str:
    """``attnum sweep ... (pid 123 on host, since 2026-01-01 12:00:00 UTC)``, one line."""
    if not holder:
        return "another attnum process (it has not yet said which)"
    since = holder.get("since")
    when = (dt.datetime.fromtimestamp(since, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            if isinstance(since, (int, float)) else "an unknown time")
    return f"'{holder.get('command') or '?'}' (pid {holder.get('pid')} on {holder.get('host')}, since {when})"
