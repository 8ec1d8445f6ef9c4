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
