"""The serving family's commands: ``decode`` (:mod:`.cli_decode`), ``fp8-table`` and ``mla-table``
(:mod:`.cli_tables`)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from attnum.studies.serving import cli_decode, cli_tables

    cli_decode.register(app)
    cli_tables.register(app)
