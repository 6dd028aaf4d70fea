"""`graphtier demo`: the whole service in a few minutes on a laptop.

Starts a daemon (or uses the running one), prepares a synthetic R-MAT dataset (skipped when
present), submits a 2-rank GraphSAGE job, shows its progress and final accuracy, prints the
metrics tables, and stops the daemon it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Annotated, Optional

import typer

from graphtier.launcher.cli.rendering import console, error_boundary


def _start_daemon(runtime_dir: Path, dataset_root: Path | None) -> tuple[subprocess.Popen[bytes], object]:
    from graphtier.launcher.cli.cluster import spawn_daemon

    argv = ["--runtime-dir", str(runtime_dir)] + (["--dataset-root", str(dataset_root)] if dataset_root else [])
    return spawn_daemon(argv, 120.0)


def _stop_daemon(popen: subprocess.Popen[bytes]) -> None:
    popen.send_signal(signal.SIGTERM)
    try:
        popen.wait(60)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


def demo(
    scale: Annotated[int, typer.Option(help="log2 of the synthetic graph's node count")] = 15,
    epochs: Annotated[int, typer.Option(help="training epochs")] = 2,
    nproc_per_node: Annotated[int, typer.Option(help="trainer ranks")] = 2,
    runtime_dir: Annotated[
        Optional[Path], typer.Option("--runtime-dir", help="the daemon's runtime directory (default $GRAPHTIER_HOME/run)")
    ] = None,
    dataset_root: Annotated[Optional[Path], typer.Option(help="where to prepare the dataset (a new daemon's root)")] = None,
) -> None:
    """Daemon, dataset, a 2-rank GraphSAGE job with live progress, accuracy and the metrics tables."""
    from graphtier.launcher.cli import job as job_cli
    from graphtier.launcher.cli.metrics import metrics
    from graphtier.launcher.client import DaemonClient
    from graphtier.contract.endpoints import default_runtime_dir
    from graphtier.contract.endpoints import read_endpoints, running_daemon_pid
    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.contract.datasets import BudgetSpec
    from graphtier.service.prepared import PrepareConfig, prepare_dataset
    from graphtier.service.prepared.catalog import list_datasets

    with error_boundary():
        directory = Path(os.path.abspath(runtime_dir)) if runtime_dir else default_runtime_dir()
        popen = None
        if running_daemon_pid(directory) is None:
            root = Path(os.path.abspath(dataset_root)) if dataset_root else None
            popen, _ = _start_daemon(directory, root)
            console.print(f"[green]started graphtierd[/] (pid {popen.pid}) for {directory}")
        else:
            console.print(f"using the graphtierd already running for {directory}")
        try:
            endpoints = read_endpoints(directory)
            assert endpoints is not None  # the daemon is serving: it wrote its endpoints
            root = Path(endpoints.dataset_root)
            name = f"rmat-{scale}"
            if name in {m.name for m in list_datasets(root)}:
                console.print(f"dataset {name} is already prepared under {root}")
            else:
                with console.status(f"preparing {name} (synthetic R-MAT, 2^{scale} nodes) under {root}"):
                    prepare_dataset(PrepareConfig(source="synthetic:rmat", name=name, undirected=True, root=root,
                                                  source_options={"scale": scale}))  # fmt: skip
                console.print(f"prepared {name}")
            budgets = BudgetSpec(num_devices=2, device_replicated="5%", device_interleaved="20%")  # accounted on CPU
            spec = JobSpec(dataset=name, model="sage", fanouts=[10, 5], batch_size=512, hidden=64, epochs=epochs,
                           nproc_per_node=nproc_per_node, name="demo", budgets=budgets)  # fmt: skip
            with DaemonClient(runtime_dir=directory) as client:
                submitted = client.submit_job(spec)
                console.print(f"submitted job [bold]{submitted.job_id}[/]: {nproc_per_node}-rank GraphSAGE on {name}")
                final = job_cli.follow(client, submitted.job_id)
            console.print(job_cli.describe(final), highlight=False, markup=False)
            metrics(runtime_dir=directory, json_out=False)
        finally:
            if popen is not None:
                _stop_daemon(popen)
                console.print(f"stopped graphtierd (pid {popen.pid})")
    if final.state.value != "succeeded":
        raise SystemExit(job_cli.EXIT_JOB_FAILED)
