"""The `graphtier` command: a thin entry point over the sub-command groups."""

from __future__ import annotations

from typing import Annotated

import typer

from graphtier.contract.command_line import FlagGroup, FlagTyper
from graphtier.launcher.cli import cluster, dataset, dataset_push, dataset_serving, demo, doctor, job, metrics
from graphtier.launcher.cli.rendering import EXIT_STATUSES, broken_pipe_is_quiet

ORDER_OF_USE = ("demo", "dataset", "cluster", "job", "metrics", "doctor")


class _InOrderOfUse(FlagGroup):
    """`graphtier --help` lists the commands in the order a user meets them (Typer's own order is
    plain commands first, then groups: metrics before dataset).

    The overrides leave their parameters unannotated: their type is the click that typer carries, a
    private module in the typer releases that vendor click (`typer._click`) and `click` before."""

    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: ORDER_OF_USE.index(n) if n in ORDER_OF_USE else len(ORDER_OF_USE))

    # A closed stdout is caught here, before click's own handling turns it into exit 1.
    def make_context(self, *args, **kwargs):
        with broken_pipe_is_quiet():  # `--help` prints while parsing
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with broken_pipe_is_quiet():
            return super().invoke(ctx)


app = FlagTyper(
    cls=_InOrderOfUse,
    help="graphtier: a training data service for GNNs.",
    epilog=EXIT_STATUSES,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"graphtier {version('graphtier')}")
        except PackageNotFoundError:
            typer.echo("graphtier (version unknown: the package is not installed)")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print graphtier's version and exit"),
    ] = False,
) -> None:
    """graphtier: a training data service for GNNs."""


dataset_serving.register(dataset.app)
dataset_push.register(dataset.app)
app.add_typer(dataset.app, name="dataset")
app.add_typer(cluster.app, name="cluster")
app.add_typer(job.app, name="job")
app.command("metrics")(metrics.metrics)
app.command("demo")(demo.demo)
app.command("doctor")(doctor.doctor)


def main() -> None:
    with broken_pipe_is_quiet():
        app()
