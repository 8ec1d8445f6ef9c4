"""The paper family's commands: ``compare`` (:mod:`.cli_compare`) and ``attribute`` (:mod:`.cli_attribute`)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from attnum.studies.paper.cli import attribute as cli_attribute
    from attnum.studies.paper.cli import compare as cli_compare

    cli_compare.register(app)
    cli_attribute.register(app)
