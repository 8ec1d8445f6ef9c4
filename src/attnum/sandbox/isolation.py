"""Killing user code whole: the process-tree machinery of the kernel server (:mod:`attnum.sandbox.server`),
which every command that runs user code uses (``attnum audit``, ``spec-audit``, ``diverge``).

The server child is started in a new POSIX session (``start_new_session``), dies with its parent
(:func:`die_with_parent`) and makes itself a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a
process the user code starts stays below it even after its own parent exits, so it cannot leave the
tree by double-forking.

Killing (:func:`kill_tree`) walks the tree below the child in ``/proc`` (every descendant, whatever its
process group or session: a ``setsid()`` does not escape), stops each one (SIGSTOP, so none forks
while the tree is walked again), then SIGKILLs all of them, the child's process group and the child.
The parent is a subreaper too while a server runs, so a process left behind by a child that has
already exited (its orphans come to the parent, not to init) is found among the parent's new
children (:func:`direct_children`) and killed as well.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

# -- in the child ------------------------------------------------------------------------------------

def die_with_parent() -> None:
    """Linux: SIGKILL this process when the parent dies (the parent may be SIGKILLed itself)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def become_subreaper(on: bool = True) -> None:
    """Linux: orphans below this process are re-parented to it, not to init (PR_SET_CHILD_SUBREAPER)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, int(on))


# -- in the parent -----------------------------------------------------------------------------------

def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (any session or group), from /proc; [] where there is none."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``'s process group, every descendant of ``pid`` (stopped first) and ``pid``."""
    stopped: set[int] = set()
    for _ in range(50):  # until a walk finds nothing new (a stopped process cannot fork)
        new = [p for p in descendants(pid) if p not in stopped]
        if not new:
            break
        for p in new:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGSTOP)
        stopped.update(new)
    for p in stopped:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def set_dumpable(on: bool) -> None:
    """Linux: ``PR_SET_DUMPABLE``. Off, this process's ``/proc/PID/fd``, ``mem`` and ``environ`` are
    closed to other processes of the same user and it cannot be ptrace-attached by them: a child running
    user code cannot open the parent's stdout through ``/proc`` and write a forged document there."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, int(on))


def direct_children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid``."""
    out = set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError), open(f"/proc/{name}/stat", "rb") as fh:
                    stat = fh.read()
                    fields = stat[stat.rfind(b")") + 2:].split()
                    if len(fields) > 1 and int(fields[1]) == pid:
                        out.add(int(name))
    return out


def death(rc: int) -> tuple[str, str]:
    """(status, what happened) for a child that ended with exit status ``rc`` before it was done."""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return "crashed", f"killed by {name}"
    return "exited", f"the process exited with code {rc}"
