"""attnum's command line: a thin face over the studies.

Each sub-command lives in its own module under ``attnum.cli`` and exposes ``register(app)``.
User errors (``ValueError``, including :class:`attnum.errors.AttnumInputError`) become one line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

_COMMAND_MODULES = (
    "compare",
    "validate",
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
    app = build_app()
    try:
        rv = app(args=argv, prog_name="attnum", standalone_mode=False)
    except ValueError as err:
        print(f"attnum: error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"attnum: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnum: interrupted", file=sys.stderr)
        return 130
    except typer.Exit as ex:
        return ex.exit_code
    except SystemExit as ex:  # typer/click usage errors
        return int(ex.code or 0)
    except Exception as err:  # click usage errors
        import click

        if isinstance(err, click.ClickException):
            err.show()
            return err.exit_code
        if isinstance(err, click.exceptions.Abort):
            print("attnum: aborted", file=sys.stderr)
            return 130
        raise
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
