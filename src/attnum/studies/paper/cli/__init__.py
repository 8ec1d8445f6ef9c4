"""The paper family's commands: ``compare`` (:mod:`.cli_compare`) and ``attribute`` (:mod:`.cli_attribute`)."""

from __future__ import annotations

import typer

PANEL = "Reproduce and sweep"  # one point of the paper's question, and which rounding site causes it


def register(app: typer.Typer) -> None:
    from attnum.studies.paper.cli import attribute as cli_attribute
    from attnum.studies.paper.cli import compare as cli_compare

    cli_compare.register(app)
    cli_attribute.register(app)
