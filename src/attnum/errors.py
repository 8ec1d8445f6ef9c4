"""One exception type for bad user input.

Every message names the parameter, the value it got and what is allowed, on one line, so that
the CLI can print it and exit 2 without a traceback.
"""

from __future__ import annotations


class AttnumInputError(ValueError):
    """Bad input: a parameter outside what is allowed."""


def bad_value(param: str, value: object, allowed: str, *, choices: object = None) -> AttnumInputError:
    """The standard one-line error: ``param=value: allowed``; with ``choices`` (the names allowed), a
    "did you mean" for the closest one to a misspelt ``value``."""
    hint = did_you_mean(value, choices) if choices is not None else ""
    return AttnumInputError(f"{param}={value!r} is not allowed; {hint}expected {allowed}")


class AttnumEnvironmentError(AttnumInputError):
    """The machine refused: a store that is corrupt, locked by another run, or not attnum's; a disk
    that is read-only or full; a configuration larger than the memory here. One line naming the
    file (or resource) and what to do; the CLI prints it and exits 2 like bad input."""


def did_you_mean(word: object, choices: object) -> str:
    """``"did you mean 'seq_len'? "`` for the closest of ``choices`` to a mistyped ``word`` (difflib's
    ratio >= 0.6, as click's for commands), or the names that contain ``word`` when there are such (up to
    three: ``"did you mean 'fully-masked-rows' or 'grad-fully-masked'? "``), else ``""``: put in front of
    the list of what is allowed."""
    import difflib

    names = [str(c) for c in choices]  # type: ignore[attr-defined]
    text = str(word)
    containing = [n for n in names if text in n and n != text] if len(text) >= 3 else []
    close = containing[:3] or difflib.get_close_matches(text, names, n=1)
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return f"did you mean {' or '.join([', '.join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)}? "
