"""attnum's command line: a thin face over the studies.

Each sub-command lives in its own module under ``attnum.cli`` and exposes ``register(app)``.

Exit status: 0 ok; 1 a check failed (audit, scan) or an internal error; 2 bad input or usage;
130 interrupted. Bad input is :class:`attnum.errors.AttnumInputError` (and click's usage errors,
and a ``FileNotFoundError``, since every path the CLI opens is one the user named): one line on
stderr, no traceback. A disk that refuses a write (read-only, full, over quota, not permitted) is
:class:`attnum.errors.AttnumEnvironmentError`'s kind: one line naming the file and what to do, exit 2.
Any other exception is a bug: one line naming it and the file that holds the full traceback.

Nothing here, and no command module, imports torch, numpy or matplotlib at import time: ``--help``
and ``--version`` stay fast, and each command imports what it runs.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import typer
from typer import _click
from typer.exceptions import Abort
from typer.models import DefaultPlaceholder

from attnum.console.conventions import ConventionalGroup
from attnum.errors import AttnumInputError

# The shell's own commands, the Quickstart's first; each study family adds its own (_register_families).
_COMMAND_MODULES = ("reproduce", "sweep", "runs", "export", "report", "audit", "fingerprint", "scan", "kernels")

# ``attnum --help`` groups the commands by what they are for, in this order. A command module says where
# its commands go with a module constant ``PANEL``; a study family's commands default to "Studies", any
# other command to "More" (so a new command shows up without an edit here).
PANELS = ("Reproduce and sweep", "Audit kernels", "Studies", "Store and reports", "More")


# A write the disk refused: what the user can act on, not a bug.
DISK_ERRNOS = {errno.EROFS: "the file system is read-only", errno.ENOSPC: "the disk is full",
               errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
               errno.EDQUOT: "the disk quota is exceeded"}


def version_text() -> str:
    """``attnum 0.1.0 (torch 2.x, Python 3.x)``: torch's version from its package metadata, never by
    importing it (that alone takes a second or more)."""
    import attnum

    extra = []
    try:
        from importlib.metadata import version

        extra.append(f"torch {version('torch')}")
    except Exception:  # noqa: BLE001 - torch's version is a courtesy; attnum's is the answer
        pass
    extra.append(f"Python {sys.version.split()[0]}")
    return f"attnum {attnum.__version__} ({', '.join(extra)})"


def _version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit(0)


class _Group(ConventionalGroup):
    """attnum's top-level group: commands listed panel by panel, in :data:`PANELS` order."""

    panel_order = PANELS


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="attnum",
        help="Numerical trustworthiness of attention kernels.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        cls=_Group,
    )

    @app.callback()
    def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                            help="Print attnum's version (and torch's) and exit.")) -> None:
        """Numerical trustworthiness of attention kernels."""

    for name in _COMMAND_MODULES:
        _register(app, importlib.import_module(f"attnum.cli.{name}"), "More")
    _register_families(app)
    return app


def _register(app: typer.Typer, module, default_panel: str) -> None:
    """``module.register(app)``, then its new commands get ``module.PANEL`` (else ``default_panel``)."""
    commands, groups = len(app.registered_commands), len(app.registered_groups)
    module.register(app)
    panel = getattr(module, "PANEL", default_panel)
    for info in [*app.registered_commands[commands:], *app.registered_groups[groups:]]:
        if isinstance(info.rich_help_panel, DefaultPlaceholder) or info.rich_help_panel is None:
            info.rich_help_panel = panel


def _register_families(app: typer.Typer) -> None:
    """Every study family's commands (the families with an ``attnum.studies.<family>.cli``), in
    :data:`attnum.studies.FAMILIES` order; only those modules are imported (no torch for ``--help``)."""
    from attnum.studies import FAMILIES

    for name in FAMILIES:
        module = f"attnum.studies.{name}.cli"
        if importlib.util.find_spec(module) is not None:
            _register(app, importlib.import_module(module), "Studies")


_INTERRUPTED: list[bool] = []  # a SIGINT arrived during this main(): what it broke is an interruption


def _on_sigint(signum, frame) -> None:
    _INTERRUPTED.append(True)
    raise KeyboardInterrupt


def _watch_interrupts():
    """Note every SIGINT (then raise KeyboardInterrupt, as Python's own handler does): an interrupt that
    lands inside a library's import (matplotlib's) comes out as its ValueError or ImportError, which is
    still an interruption, exit 130, never an internal error. Returns the handler to restore."""
    import signal
    import threading

    _INTERRUPTED.clear()
    if threading.current_thread() is not threading.main_thread():
        return None
    before = signal.getsignal(signal.SIGINT)
    if before is not signal.default_int_handler:
        return None  # someone else (a test runner, an embedding program) owns it
    signal.signal(signal.SIGINT, _on_sigint)
    return before


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see the module docstring)."""
    from attnum.console import progress

    # Elapsed times count from the command's start: the process's (interpreter, imports) when this is
    # the program itself, this call's when a caller (a test) runs commands in its own process.
    progress.command_started((progress.process_age_s() or 0.0) if argv is None else 0.0)
    before = _watch_interrupts()
    try:
        code = _main(argv)
        if _INTERRUPTED and code != 130:  # a library swallowed the KeyboardInterrupt and the command went on
            print("attnum: interrupted", file=sys.stderr)
            return 130
        return code
    except KeyboardInterrupt:  # while the commands were being registered (their imports)
        print("attnum: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - as in _main: an interrupted import, or a bug
        if _INTERRUPTED:
            print("attnum: interrupted", file=sys.stderr)
            return 130
        return _internal(err, argv)
    finally:
        progress.command_started(None)  # an Activity outside a command counts from its own start
        if before is not None:
            import signal

            signal.signal(signal.SIGINT, before)


def _main(argv: list[str] | None) -> int:
    app = build_app()
    try:
        code = typer.main.get_command(app).main(args=argv, prog_name="attnum", standalone_mode=False)
        if code == 130:  # typer turns a KeyboardInterrupt (SIGINT, or SIGTERM in a sweep) into Exit(130)
            print("attnum: interrupted", file=sys.stderr)
        return code if isinstance(code, int) else 0
    except SystemExit as ex:  # no command calls sys.exit with 0: code it ran did (a kernel in training...)
        if isinstance(ex.code, int) and ex.code != 0:
            return ex.code  # click's own exit on a closed stdout (EPIPE) is 1
        # Never exit 0 on it: nothing finished.
        print(f"attnum: error: code this command ran called sys.exit({ex.code!r}) before the command "
              "finished; nothing was completed", file=sys.stderr)
        return 1
    except _click.exceptions.NoArgsIsHelpError as err:  # `attnum` (or a group) alone: the help, once
        # The error's message is the help. Under typer's rich formatting, building it printed the help
        # already and left the message empty: printing err.ctx.get_help() again showed it twice.
        message = err.format_message()
        if message.strip():
            print(message)
        return err.exit_code
    except _click.exceptions.ClickException as err:  # usage: unknown flag, missing argument, bad type
        print(f"attnum: error: {_one_line(err.format_message())}", file=sys.stderr)
        return err.exit_code
    except Abort:
        print("attnum: interrupted", file=sys.stderr)
        return 130
    except (AttnumInputError, FileNotFoundError) as err:
        print(f"attnum: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in DISK_ERRNOS:
            return _internal(err, argv)
        print(f"attnum: error: {disk_message(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnum: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - anything else is a bug: say where its traceback is
        if _INTERRUPTED:  # what a Ctrl-C broke (an import half done): the interrupt, not a bug
            print("attnum: interrupted", file=sys.stderr)
            return 130
        return _internal(err, argv)


def _internal(err: BaseException, argv: list[str] | None) -> int:
    where = write_traceback(err, sys.argv if argv is None else ["attnum", *argv])
    first = (str(err).strip().splitlines() or [""])[0]
    print(f"attnum: internal error: {type(err).__name__}: {first} ({where})", file=sys.stderr)
    return 1


def disk_message(err: OSError) -> str:
    """One line for a file operation the disk refused: the file, why, and what to do."""
    where = err.filename if err.filename is not None else "an output file"
    why = DISK_ERRNOS.get(err.errno, err.strerror or "refused")
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        todo = "free some space, or choose another output folder (--out/-o)"
    elif err.errno == errno.EROFS:
        todo = "choose an output folder on a writable file system (--out/-o)"
    else:
        todo = "check its permissions, or choose another output folder (--out/-o)"
    return f"{where}: {why} ({errno.errorcode.get(err.errno, err.errno)}); {todo}"


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
