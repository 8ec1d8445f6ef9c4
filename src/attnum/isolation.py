"""User code in a child process that is killed whole: the machinery ``attnum audit`` and ``attnum
spec-audit`` share (each has its own protocol on top: attnum.audit.isolate, attnum.spec_audit.isolate).

The parent starts ``python -m MODULE`` in a new POSIX session (``start_new_session``), writes one
pickled request on its stdin and reads length-prefixed pickled frames from its stdout
(:meth:`Child.frames`). The child (:func:`child_channel`) points its own stdout at stderr, so whatever
user code prints never reaches the parent's stdout (``--json`` stays clean), and makes itself a
*child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a process the user code starts stays below it
even after its own parent exits, so it cannot leave the tree by double-forking.

Killing (:meth:`Child.kill`) walks the tree below the child in ``/proc`` (every descendant, whatever its
process group or session: a ``setsid()`` does not escape), stops each one (SIGSTOP, so none forks
while the tree is walked again), then SIGKILLs all of them, the child's process group and the child.
The parent is a subreaper too, so a process left behind by a child that has already exited (its
orphans come to the parent, not to init) is found among the parent's new children and killed as well.

Reading never waits for an EOF that a descendant can withhold: a descendant that inherited the pipe
keeps it open, so the parent also watches the child itself, and once the child has exited it reads
what is already in the pipe and stops. A frame longer than :data:`MAX_FRAME` bytes is garbage: the
child is treated as dead.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

HEADER = struct.Struct("!I")
MAX_FRAME = 256 << 20  # bytes; a longer frame is not a message
_POLL_S = 0.25  # how often the parent looks whether the child is still alive while it waits


class ChildGone(Exception):
    """The child sent a frame that is not a message (garbage on the channel)."""


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


def child_channel() -> tuple[Callable[..., None], dict[str, Any]]:
    """In the child: (send, request). ``send(*msg)`` writes one frame to the parent."""
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    os.set_inheritable(channel.fileno(), False)
    os.dup2(2, 1)  # whatever user code prints goes to stderr, never into the parent's stdout
    request = pickle.load(sys.stdin.buffer)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if os.getppid() != request["parent"]:
        os._exit(0)  # the parent is already gone
    die_with_parent()
    become_subreaper()
    import faulthandler

    faulthandler.enable()  # a crash leaves the Python stack on stderr
    sys.path[:] = request["sys_path"]  # the parent's view of importable modules

    def send(*msg: object) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        channel.write(HEADER.pack(len(data)) + data)

    return send, request


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


class Child:
    """One child process (``python -m module``) and the frames it sends."""

    def __init__(self, module: str, request: dict[str, Any]) -> None:
        become_subreaper()  # the orphans of a child that exits come here, where kill() finds them
        self._before = direct_children(os.getpid())
        self.proc = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True)
        request = {**request, "sys_path": list(sys.path), "parent": os.getpid()}
        try:
            self.proc.stdin.write(pickle.dumps(request))
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # it died at once: the next read says how
        self.fd = self.proc.stdout.fileno()
        self.buf = b""
        self.budget = 0.0

    def _parse(self) -> Iterator[tuple]:
        while len(self.buf) >= HEADER.size:
            (n,) = HEADER.unpack_from(self.buf)
            if n > MAX_FRAME:
                raise ChildGone(f"a frame of {n} bytes")
            if len(self.buf) < HEADER.size + n:
                return
            data, self.buf = self.buf[HEADER.size:HEADER.size + n], self.buf[HEADER.size + n:]
            try:
                yield pickle.loads(data)
            except Exception as err:  # noqa: BLE001 - bytes that do not unpickle: not our child's message
                raise ChildGone(f"an unreadable frame ({type(err).__name__})") from None

    def frames(self, timeout: float) -> Iterator[tuple]:
        """Yield messages; ends at EOF, or once the child has exited and the pipe holds nothing more
        (a descendant holding the pipe open cannot make this wait). Raises TimeoutError after
        ``self.budget`` s without a message (``timeout`` until the caller changes it)."""
        self.budget = timeout
        import time

        while True:
            yield from self._parse()
            silent_since = time.monotonic()
            while True:
                ready, _, _ = select.select([self.fd], [], [], min(_POLL_S, self.budget))
                if ready:
                    break
                if self.proc.poll() is not None:  # exited: what it wrote is in the pipe already
                    ready, _, _ = select.select([self.fd], [], [], 0)
                    if not ready:
                        return
                    break
                if time.monotonic() - silent_since >= self.budget:
                    raise TimeoutError
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return
            self.buf += chunk

    def kill(self) -> int:
        """Kill the child and everything below it (module doc); its exit status."""
        kill_tree(self.proc.pid)
        rc = self.proc.wait()
        for orphan in direct_children(os.getpid()) - self._before - {self.proc.pid}:
            kill_tree(orphan)  # left by the child before it exited, re-parented here
            with contextlib.suppress(OSError):
                os.waitpid(orphan, 0)
        become_subreaper(False)  # this process goes back to what it was
        if not self.proc.stdout.closed:
            self.proc.stdout.close()
        return rc

    def status(self) -> int:
        """The exit status once the child has ended (it may take a moment to be reaped)."""
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return self.kill()


def death(rc: int) -> tuple[str, str]:
    """(status, what happened) for a child that ended with exit status ``rc`` before it was done."""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return "crashed", f"killed by {name}"
    return "exited", f"the process exited with code {rc}"
