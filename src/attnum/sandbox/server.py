"""User code in a *kernel server*: a child process that only computes the user's function.

Every command that runs user code (``attnum audit``, ``attnum spec-audit``, ``attnum diverge
--attention file.py:fn``) starts ``python -m attnum.sandbox.server`` in its own POSIX session
(:mod:`attnum.sandbox.isolation`: a subreaper, killed whole, ``setsid()`` included). The parent sends one
``init`` frame (what to resolve), then one request per call; the child resolves the target, calls it
on the inputs it is sent and answers with its outputs as data (:mod:`attnum.sandbox.wire`: JSON and
raw tensor bytes, never a pickle). The parent checks every reply (type, dtype, shape, byte count),
computes the golden values, the probes and the verdicts itself. So whatever the user code writes to
the channel, or patches inside the child, is at most a wrong output for that call, judged as the
kernel's answer; it is never a verdict.

Requests and replies::

    init    {kind: attention|sampler, spec, device, numerics, arch, block_q, block_k, threads, resolver}
            -> ready {available, reason, declared, attrs, entries, name} | input_error {text}
    call    {id, entry, args, kw, grad_args, grad_mode, autocast, writeback}
            -> ok {id, result, graph, writeback, generators} | raised {id, type, text}
    backward {id, ref, grad_out} -> ok {id, result: [dq, dk, ...]} | raised   (ref: the call's id)
    release {ids}            (no reply: the child drops those graphs)

Each call has ``timeout`` seconds (the first, ``init``, also :data:`IMPORT_GRACE` more); a call
past it, a child that dies, or a reply that is malformed or answers another call raises
:class:`TargetGone` (a ``BaseException``: no probe's ``except Exception`` turns it into a verdict)
after the whole tree is killed. The caller turns it into a ``crashed`` / ``timed out`` / ``exited``
verdict or a failed command.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time

from attnum.errors import AttnumInputError
from attnum.kernels.triton.addresses import OutOfBounds, Unchecked
from attnum.sandbox.isolation import become_subreaper, death, direct_children, kill_tree, set_dumpable
from attnum.sandbox.wire import HEAD, MAX_HEADER, MAX_PAYLOAD, Malformed, decode, encode

IMPORT_GRACE = 60.0  # seconds added to the first call for the child's own start (python, torch, attnum)
_POLL_S = 0.25


class TargetGone(BaseException):  # noqa: N818 - a control-flow signal, like SystemExit
    """The server died, hung past the timeout or broke the protocol. ``status`` is ``crashed``,
    ``timed out`` or ``exited``; ``what`` says what happened; ``ready``: whether it had resolved."""

    def __init__(self, status: str, what: str, *, ready: bool) -> None:
        super().__init__(f"{status}: {what}")
        self.status, self.what, self.ready = status, what, ready


class RemoteError(Exception):
    """An exception the user code raised in the server (``type`` is its class name there)."""


_REMOTE_TYPES: dict[str, type] = {"NotImplementedError": NotImplementedError, "OutOfBounds": OutOfBounds,
                                  "Unchecked": Unchecked}


def remote_exception(type_name: object, text: object) -> Exception:
    """The exception to raise here for one the user code raised there: NotImplementedError stays
    itself (a declared limitation), and so do the Triton model's address findings (:class:`OutOfBounds`,
    :class:`Unchecked`); any other is a :class:`RemoteError` subclass with its name."""
    name = type_name if isinstance(type_name, str) and type_name.isidentifier() and len(type_name) < 100 \
        else "RemoteError"
    cls = _REMOTE_TYPES.get(name)
    if cls is None:
        cls = _REMOTE_TYPES.setdefault(name, type(name, (RemoteError,), {}))
    return cls(str(text)[:2000])


# -- the parent ------------------------------------------------------------------------------------

class KernelServer:
    """One server process. :meth:`start` resolves; :meth:`request` is one call; :meth:`close` kills."""

    def __init__(self, kind: str, spec: str, *, device: str = "cpu", timeout: float = 300.0, threads: int = 1,
                 numerics: str = "faithful", block_q: int | None = None, block_k: int | None = None,
                 resolver: str | None = None, arch: str = "sm90") -> None:
        self.timeout, self.ready, self.next_id, self.info = timeout, False, 0, {}
        self.noun = "sampler" if kind == "sampler" else "target"  # how messages name the user's code
        self.init = {"op": "init", "kind": kind, "spec": spec, "device": device, "numerics": numerics, "arch": arch,
                     "block_q": block_q, "block_k": block_k, "threads": threads, "sys_path": list(sys.path),
                     "resolver": resolver,
                     "parent": os.getpid()}
        self.proc: subprocess.Popen | None = None
        self._closed = False
        self.warnings: list[str] = []  # what the user code warned since take_warnings() last ran

    def start(self) -> dict:
        """Start the child and wait for ``ready``: its info; AttnumInputError when the name does not
        resolve; TargetGone when the import dies or hangs."""
        become_subreaper()  # the orphans of a child that exits come here, where close() finds them
        set_dumpable(False)  # the child cannot open this process's fds through /proc, nor ptrace it
        self._before = direct_children(os.getpid())
        self.proc = subprocess.Popen([sys.executable, "-m", "attnum.sandbox.server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, start_new_session=True)
        self._send(self.init)
        msg = self._recv(self.timeout + IMPORT_GRACE, "")
        if msg.get("op") == "input_error":
            self.close()
            raise AttnumInputError(str(msg.get("text", "the target does not resolve")).splitlines()[0][:2000])
        if msg.get("op") != "ready":
            self._gone("crashed", f"sent {str(msg.get('op'))[:40]!r} instead of ready", "")
        self.ready, self.info = True, msg
        return msg

    def request(self, msg: dict, what: str) -> dict:
        """Send one call (``msg`` gets a fresh id) and return its checked reply."""
        if self._closed:
            raise TargetGone("crashed", f"the server had already been stopped, {what}", ready=self.ready)
        self.next_id += 1
        msg = {**msg, "id": self.next_id}
        self._send(msg)
        reply = self._recv(self.timeout, what)
        if reply.get("id") != self.next_id or reply.get("op") not in ("ok", "raised"):
            self._gone("crashed", f"answered call {self.next_id} with {str(reply)[:60]!r}", what)
        got = reply.pop("warnings", None)  # data from the child: kept only as short strings
        if isinstance(got, list):
            self.warnings += [w[:200] for w in got[:20] if isinstance(w, str)]
        return reply

    def take_warnings(self) -> list[str]:
        """The warnings the user code raised since the last call of this, oldest first."""
        got, self.warnings = self.warnings, []
        return got

    def tell(self, msg: dict) -> None:
        """A request without a reply (``release``); a dead child is noticed at the next call."""
        with contextlib.suppress(OSError, TargetGone):
            self._send(msg)

    def _send(self, msg: dict) -> None:
        try:
            self.proc.stdin.write(encode(msg))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # it died: the read that follows says how

    def _recv(self, budget: float, what: str) -> dict:
        """One frame, read into a buffer allocated once at its announced size (a 512 MiB reply is one
        allocation and reads straight into it, not a bytes object grown by copies: quadratic). Nothing
        past the frame's end is read, so the next frame stays in the pipe."""
        deadline = time.monotonic() + budget
        fd = self.proc.stdout.fileno()
        head = bytearray(HEAD.size)
        got = self._fill(fd, memoryview(head), deadline, budget, what)
        n_head, n_payload = HEAD.unpack_from(head)
        if n_head > MAX_HEADER or n_payload > MAX_PAYLOAD:
            self._gone("crashed", f"sent a frame of {n_head} + {n_payload} bytes (not a reply)", what)
        frame = bytearray(n_head + n_payload)
        got = self._fill(fd, memoryview(frame), deadline, budget, what)
        try:
            return decode(bytes(got[:n_head]), got[n_head:])
        except Malformed as err:
            self._gone("crashed", f"sent {err} (not a reply)", what)

    def _fill(self, fd: int, view: memoryview, deadline: float, budget: float, what: str) -> memoryview:
        """Read exactly ``len(view)`` bytes into ``view`` (os.readv: no intermediate copies) by ``deadline``."""
        filled, n = 0, len(view)
        while filled < n:
            left = deadline - time.monotonic()
            if left <= 0:
                self._gone("timed out", f"no answer within {budget:g} s", what)
            ready, _, _ = select.select([fd], [], [], min(_POLL_S, left))
            if not ready:
                if self.proc.poll() is not None and not select.select([fd], [], [], 0)[0]:
                    self._gone(*death(self.proc.wait()), what)
                continue
            k = os.readv(fd, [view[filled:]])
            if not k:
                self._gone(*death(self._status()), what)
            filled += k
        return view

    def _status(self) -> int:
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # closed its end but lives on: a protocol break
            self.close()
            return self.proc.wait()

    def _gone(self, status: str, what: str, where: str):
        self.close()
        raise TargetGone(status, f"{what}{', ' + where if where else ''}", ready=self.ready)

    def close(self) -> None:
        """Kill the child and everything below it (attnum.sandbox.isolation); safe to call twice (the second
        call kills nothing: the child's pid may belong to another process by then)."""
        if self.proc is None or self._closed:
            return
        self._closed = True
        kill_tree(self.proc.pid)
        self.proc.wait()
        for orphan in direct_children(os.getpid()) - self._before - {self.proc.pid}:
            kill_tree(orphan)  # left by the child before it exited, re-parented here
            with contextlib.suppress(OSError):
                os.waitpid(orphan, 0)
        become_subreaper(False)
        set_dumpable(True)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                f.close()

    def __enter__(self) -> KernelServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    from attnum.sandbox.child import serve

    serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # atexit handlers and threads the user code left behind must not hold the child
