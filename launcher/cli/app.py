"""The `graphtier` command: a thin entry point over the sub-command groups."""

from __future__ import annotations

import typer

from graphtier.launcher.cli import dataset

app = typer.Typer(
    help="graphtier: a training data service for GNNs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(dataset.app, name="dataset")


def main() -> None:
    app()
