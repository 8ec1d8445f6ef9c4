"""Who is running: a process identity that survives pid reuse, and children that die with their parent.

A pid alone is not an identity: after a crash the kernel hands the same number to a new process.
:func:`this_process` adds the host and the process's start time (Linux: the boot id and the start
tick from ``/proc/PID/stat``), so :func:`is_running` tells a store's lock holder or a ``running`` run
from an unrelated process that got its pid.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
WATCHDOG_PERIOD_S = 1.0


def start_time(pid: int) -> str | None:
    """``BOOT_ID:TICKS`` of process ``pid`` on Linux, else None (unknown); None when it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields after the last ')' are fixed.
    return f"{boot}:{stat.rsplit(')', 1)[1].split()[19]}"


def this_process() -> dict[str, Any]:
    """pid, host and start time of this process (what a lock or a run records)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "proc_start": start_time(os.getpid())}


def is_running(pid: int | None, host: str | None, proc_start: str | None) -> bool | None:
    """Is the recorded process still the one running? True, False, or None when it cannot be told
    (another host, or no pid recorded)."""
    if not pid or host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    except OSError:
        return None
    if proc_start is not None:
        now = start_time(pid)
        if now is not None and now != proc_start:
            return False  # the pid was reused by a different process
    return True


def die_with_parent(parent_pid: int) -> None:
    """Make this (worker) process end when ``parent_pid`` does, even when the parent is SIGKILLed.

    Linux: the kernel sends SIGKILL on the parent's death (``prctl(PR_SET_PDEATHSIG)``). Everywhere, a
    daemon thread also polls ``os.getppid()``: an orphan is re-parented, so a changed parent pid
    means the parent is gone (this also covers a parent that died before the prctl call).
    The kernel ties PDEATHSIG to the *thread* that started the child: start workers from a thread
    that lives as long as they should (attnum's pools start them from the main thread).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG_PERIOD_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="attnum-parent-watchdog", daemon=True).start()
