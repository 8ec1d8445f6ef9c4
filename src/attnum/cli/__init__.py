"""attnum's command line: a thin face over the studies.

Each sub-command lives in its own module under ``attnum.cli`` and exposes ``register(app)``.

Exit status: 0 ok; 1 a check failed (audit, scan) or an internal error; 2 bad input or usage;
130 interrupted. Bad input is :class:`attnum.errors.AttnumInputError` (and click's usage errors,
and a ``FileNotFoundError``, since every path the CLI opens is one the user named): one line on
stderr, no traceback. Any other exception is a bug: one line naming it and the file that holds the
full traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import typer

from attnum.errors import AttnumInputError

_COMMAND_MODULES = (
    "compare",
    "attribute",
    "validate",
    "sweep", "reproduce", "runs", "export", "report",
    "diverge",
    "decode",
    "audit", "scan",
    "spec", "ring",
    "fp8_table",
)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="attnum",
        help="Numerical trustworthiness of attention kernels.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name in _COMMAND_MODULES:
        importlib.import_module(f"attnum.cli.{name}").register(app)
    return app


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see the module docstring)."""
    app = build_app()
    try:
        app(args=argv, prog_name="attnum", standalone_mode=True)
    except SystemExit as ex:  # click's standalone mode ends every run with sys.exit
        return ex.code if isinstance(ex.code, int) else (0 if ex.code is None else 1)
    except (AttnumInputError, FileNotFoundError) as err:
        print(f"attnum: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnum: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - anything else is a bug: say where its traceback is
        where = write_traceback(err, sys.argv if argv is None else ["attnum", *argv])
        first = (str(err).strip().splitlines() or [""])[0]
        print(f"attnum: internal error: {type(err).__name__}: {first} ({where})", file=sys.stderr)
        return 1
    return 0


def write_traceback(err: BaseException, argv: list[str]) -> str:
    """Write the command line, versions and ``err``'s traceback to a fresh file in the temp dir.

    Returns ``"traceback written to PATH"``, or, when no file can be written, the reason and the
    traceback itself on stderr (it must not be lost).
    """
    import attnum

    text = "".join([
        f"attnum {attnum.__version__}, Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n",
        f"command: {' '.join(map(str, argv))}\n\n",
        *traceback.format_exception(type(err), err, err.__traceback__),
    ])
    try:
        fd, path = tempfile.mkstemp(prefix="attnum-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as why:
        sys.stderr.write(text)
        return f"traceback printed above; no file could be written: {why}"
    return f"traceback written to {Path(path)}"


def _one_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines) if lines else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
