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
    "sweep", "reproduce", "runs", "export", "report",
    "diverge",
    "audit", "scan",
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
    """Run the CLI; returns the exit status (0 ok, 1 a check failed, 2 bad input or usage)."""
    app = build_app()
    try:
        app(args=argv, prog_name="attnum", standalone_mode=True)
    except SystemExit as ex:  # click's standalone mode ends every run with sys.exit
        return ex.code if isinstance(ex.code, int) else (0 if ex.code is None else 1)
    except (ValueError, FileNotFoundError) as err:
        print(f"attnum: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnum: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
