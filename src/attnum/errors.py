"""One exception type for bad user input.

Every message names the parameter, the value it got and what is allowed, on one line, so that
the CLI can print it and exit 2 without a traceback.
"""

from __future__ import annotations


class AttnumInputError(ValueError):
    """Bad input: a parameter outside what is allowed."""


def bad_value(param: str, value: object, allowed: str) -> AttnumInputError:
    """The standard one-line error: ``param=value: allowed``."""
    return AttnumInputError(f"{param}={value!r} is not allowed; expected {allowed}")


class AttnumEnvironmentError(AttnumInputError):
    """The machine refused: a store that is corrupt, locked by another run, or not attnum's; a disk
    that is read-only or full; a configuration larger than the memory here. One line naming the
    file (or resource) and what to do; the CLI prints it and exits 2 like bad input."""
