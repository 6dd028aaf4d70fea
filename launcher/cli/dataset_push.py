"""`graphtier dataset push NAME --to NODE`: send a prepared dataset to another node of the cluster.

The local daemon streams it to the peer daemon over gRPC (TLS and the cluster's token) in
chunks; the peer checks every file's sha256 against the manifest and moves the dataset into
place only when all of it arrived, so a cut connection leaves nothing half-written there.
"""

from __future__ import annotations

from typing import Annotated

import typer

from graphtier.launcher.cli.options import RuntimeDirOption, runtime_directory
from graphtier.launcher.cli.rendering import console, emit_json, error_boundary, human_bytes


def push(
    name: Annotated[str, typer.Argument(help="a prepared dataset of this node's daemon")],
    to: Annotated[str, typer.Option("--to", help="the node to send it to: its name or HOST:PORT (a peer)")],
    replace: Annotated[bool, typer.Option("--replace", help="overwrite another version of it on that node")] = False,
    runtime_dir: RuntimeDirOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="machine-readable output on stdout")] = False,
) -> None:
    """Stream a prepared dataset to a peer node, checked by sha256 and written atomically there."""
    with error_boundary():
        from graphtier.launcher.client import DaemonClient

        directory = runtime_directory(runtime_dir)
        with DaemonClient(runtime_dir=directory) as client:
            result = client.push_dataset(name, to, replace=replace)
        if json_out:
            emit_json(result.model_dump(mode="json"))
            return
        if result.unchanged:
            console.print(f"{result.node} already has {name} at version {result.version[:16]}; nothing sent")
            return
        rate = result.bytes / result.seconds if result.seconds > 0 else 0.0
        console.print(
            f"pushed {name} ({human_bytes(result.bytes)}, version {result.version[:16]}) to {result.node} "
            f"in {result.seconds:.1f} s ({human_bytes(rate)}/s)"
        )


def register(app: typer.Typer) -> None:
    """Add `push` to the `dataset` group."""
    app.command("push")(push)
