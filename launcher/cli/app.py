"""The `graphtier` command: a thin entry point over the sub-command groups."""

from __future__ import annotations

import typer

from graphtier.launcher.cli import cluster, dataset, dataset_serving, demo, doctor, job, metrics

app = typer.Typer(
    help="graphtier: a training data service for GNNs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
dataset_serving.register(dataset.app)
app.add_typer(dataset.app, name="dataset")
app.add_typer(cluster.app, name="cluster")
app.add_typer(job.app, name="job")
app.command("metrics")(metrics.metrics)
app.command("demo")(demo.demo)
app.command("doctor")(doctor.doctor)


def main() -> None:
    app()
