"""The paper family's commands: ``compare`` (:mod:`.cli_compare`) and ``attribute`` (:mod:`.cli_attribute`)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from attnum.studies.paper import cli_attribute, cli_compare

    cli_compare.register(app)
    cli_attribute.register(app)
