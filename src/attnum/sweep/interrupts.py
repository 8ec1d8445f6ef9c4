"""How a sweep's driver takes SIGINT and SIGTERM: raised once as KeyboardInterrupt, and remembered."""

from __future__ import annotations

import signal
import threading
from typing import Any


class Interrupts:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the driver, and are also remembered.

    The flag makes an interruption stick (a KeyboardInterrupt raised while Python runs a finaliser
    or a weakref callback is printed and dropped); the loops check it as well. While cleaning up,
    further signals are only recorded. A signal this process inherited as ignored stays ignored, as
    POSIX shells expect of a background job (``cmd &`` in a script ignores SIGINT); SIGTERM still
    stops such a sweep cleanly.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.cleaning_up = False
        self._before: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._before[sig] = signal.signal(sig, self._handle)
        return self

    def reinstall(self) -> None:
        """Take the signals back from a library that installed its own (``ray.init`` does, for SIGTERM)."""
        for sig in self._before:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        first = self.signum is None
        self.signum = signum
        if first and not self.cleaning_up:
            raise KeyboardInterrupt(signal.Signals(signum).name)

    def check(self) -> None:
        if self.signum is not None and not self.cleaning_up:
            raise KeyboardInterrupt(signal.Signals(self.signum).name)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)
