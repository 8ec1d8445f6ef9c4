"""``python -m attnum`` runs the CLI."""

import signal
import sys

_hit = []


def _on_sigint(signum, frame):  # Ctrl-C while attnum itself is still being imported (torch: a second)
    _hit.append(True)
    raise KeyboardInterrupt


_before = signal.getsignal(signal.SIGINT)
if _before is not signal.SIG_IGN:  # not when ignored (``cmd &`` in a script)
    signal.signal(signal.SIGINT, _on_sigint)
    _before = signal.default_int_handler
try:
    from attnum.cli import main
except BaseException as exc:
    if _hit or isinstance(exc, KeyboardInterrupt):
        print("attnum: interrupted", file=sys.stderr)
        sys.exit(130)
    raise
signal.signal(signal.SIGINT, _before)  # main() watches from here
sys.exit(main())
