"""`graphtier dataset unload`: take a dataset out of the daemon's memory (its tiers, its shm)."""

from __future__ import annotations

from typing import Annotated

import typer

from graphtier.launcher.cli.options import RuntimeDirOption, runtime_directory
from graphtier.launcher.cli.rendering import console, emit_json, error_boundary, human_bytes


def unload(
    name: Annotated[str, typer.Argument(help="the loaded dataset")],
    force: Annotated[bool, typer.Option("--force", help="cancel the jobs that use it first")] = False,
    runtime_dir: RuntimeDirOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output on stdout")] = False,
) -> None:
    """Free a loaded dataset's shared memory and GPU tiers (refused while jobs use it, unless --force)."""
    with error_boundary():
        from graphtier.launcher.client import DaemonClient

        directory = runtime_directory(runtime_dir)
        with DaemonClient(runtime_dir=directory) as client:
            result = client.unload_dataset(name, force=force)
        if json_out:
            emit_json(
                {
                    "dataset": name,
                    "released_bytes": result.released_bytes,
                    "cancelled_job_ids": result.cancelled_job_ids,
                }
            )
            return
        cancelled = f"; cancelled job(s) {', '.join(result.cancelled_job_ids)}" if result.cancelled_job_ids else ""
        console.print(f"unloaded {name}: released {human_bytes(result.released_bytes)}{cancelled}")


def register(app: typer.Typer) -> None:
    """Add the commands that act on the daemon's copy of datasets to the `dataset` group."""
    app.command("unload")(unload)
