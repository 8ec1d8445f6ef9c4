"""stdout is attnum's: what user code prints while attnum runs it goes to stderr.

A command whose stdout is a document (``attnum audit --json``, ``attnum fingerprint --json``) runs a
target in its own process when asked (``--no-isolate``, a ``--matmul`` callable); a ``print`` there, a
``sys.__stdout__.write`` or an ``os.write(1, ...)`` from C would land ahead of the document, where a script
reading the first line takes it for attnum's (issue 42: a forged ``{"verdict": "PASS"}``). Inside
:func:`user_output_to_stderr` file descriptor 1 and ``sys.stdout`` are both stderr; the document is
printed after it ends. The isolated path does the same in its child (:mod:`attnum.sandbox.child`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


def _flush(*streams) -> None:
    for s in streams:
        with contextlib.suppress(Exception):  # a closed or replaced stream has nothing of ours to flush
            s.flush()


@contextlib.contextmanager
def user_output_to_stderr() -> Iterator[None]:
    """Within: fd 1 is a copy of fd 2 and ``sys.stdout`` is ``sys.stderr``; after: both as they were,
    with whatever was written meanwhile (buffered in ``sys.__stdout__`` too) flushed to stderr first."""
    _flush(sys.stdout, sys.__stdout__)
    try:
        saved = os.dup(1)
    except OSError:  # fd 1 closed: nothing user code writes can reach a document on it
        saved = None
    if saved is not None:
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr either: user output goes nowhere rather than into the document
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
    old = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        _flush(sys.stdout, sys.__stdout__, sys.stderr)
        sys.stdout = old
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
