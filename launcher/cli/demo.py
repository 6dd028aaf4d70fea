"""`graphtier demo`: the whole service in a few minutes on a laptop.

Starts a daemon (or uses the running one), prepares a synthetic R-MAT dataset (skipped when
present), submits a GraphSAGE job fitted to the GPUs the daemon sees (`demo_placement`), shows
its progress and final accuracy, prints the metrics tables, and stops the daemon it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from graphtier.launcher.cli.rendering import EXIT_JOB_FAILED, console, error_boundary, report_console

if TYPE_CHECKING:
    from graphtier.launcher.client import DaemonClient


def _start_daemon(runtime_dir: Path, dataset_root: Path | None) -> tuple[subprocess.Popen[bytes], object]:
    from graphtier.launcher.cli.cluster import spawn_daemon

    argv = ["--runtime-dir", str(runtime_dir)] + (["--dataset-root", str(dataset_root)] if dataset_root else [])
    return spawn_daemon(argv, 120.0)


DEMO_RANKS = 2


@dataclass(frozen=True)
class DemoPlacement:
    """Where the demo's ranks compute, how many there are, and how many devices its tiers span."""

    device: str  # "cuda" (one GPU per rank) or "cpu" (gloo)
    nproc_per_node: int
    num_devices: int
    summary: str


def demo_placement(gpus: int, nproc_per_node: int | None = None) -> DemoPlacement:
    """The demo's job for a daemon that sees `gpus` CUDA devices. With GPUs: min(2, gpus) cuda ranks
    (or `nproc_per_node`, one GPU each) and device tiers on as many GPUs, since the daemon refuses
    tiers spanning more GPUs than it has. Without: CPU ranks, and device tiers for 2 devices that
    the daemon accounts without placing them (it has nowhere to put them)."""
    if gpus < 0:
        raise ValueError(f"demo_placement: gpus must be >= 0, got {gpus}")
    if nproc_per_node is not None and nproc_per_node < 1:
        raise typer.BadParameter(f"must be >= 1, got {nproc_per_node}", param_hint="--nproc-per-node")
    if gpus == 0:
        ranks = nproc_per_node or DEMO_RANKS
        return DemoPlacement(
            "cpu",
            ranks,
            DEMO_RANKS,
            f"the daemon sees no GPU: {ranks} CPU rank(s), device tiers accounted for {DEMO_RANKS} devices, not placed",
        )
    ranks = nproc_per_node or min(DEMO_RANKS, gpus)
    if ranks > gpus:
        raise typer.BadParameter(
            f"{ranks} cuda ranks need one GPU each but the daemon sees {gpus}", param_hint="--nproc-per-node"
        )
    devices = min(DEMO_RANKS, gpus)
    return DemoPlacement(
        "cuda", ranks, devices, f"the daemon sees {gpus} GPU(s): {ranks} cuda rank(s), device tiers on {devices} GPU(s)"
    )


def _daemon_gpus(client: DaemonClient) -> int:
    """The CUDA devices the daemon's torch sees (what it admits cuda ranks against)."""
    return next(node.gpus for node in client.cluster_view().nodes if node.is_self)


def reading_guide(num_classes: int) -> str:
    """What the demo's figures say, printed between the job and the metrics."""
    return (
        f"How to read it: the graph's nodes fall into {num_classes} planted communities, the classes, so "
        f"guessing scores {1 / num_classes:.1%}. Val and test accuracy are the trained model's on nodes it "
        "never trained on, evaluated with dropout off. Train acc is lower: it is measured on the training "
        "batches while the model is still learning, with dropout (0.5) dropping half of its hidden units. "
        "Below, the hit ratio is the share of gathered feature rows the device tiers served: 25% of the "
        "rows, the hottest, placed there serve most of the reads."
    )


def _stop_daemon(popen: subprocess.Popen[bytes]) -> None:
    popen.send_signal(signal.SIGTERM)
    try:
        popen.wait(60)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


def demo(
    scale: Annotated[int, typer.Option(help="log2 of the synthetic graph's node count")] = 15,
    epochs: Annotated[int, typer.Option(help="training epochs (10: about 80% accuracy on the 8 communities)")] = 10,
    nproc_per_node: Annotated[
        int | None, typer.Option(help="trainer ranks (default: 2 on CPU, min(2, GPUs) on GPUs)")
    ] = None,
    runtime_dir: Annotated[
        Path | None, typer.Option("--runtime-dir", help="the daemon's runtime directory (default $GRAPHTIER_HOME/run)")
    ] = None,
    dataset_root: Annotated[
        Path | None, typer.Option(help="where to prepare the dataset (a new daemon's root)")
    ] = None,
) -> None:
    """Daemon, dataset, a GraphSAGE job (cuda ranks on the daemon's GPUs, CPU ranks without) with live progress,
    accuracy and the metrics tables."""
    from graphtier.contract.datasets import BudgetSpec
    from graphtier.contract.endpoints import default_runtime_dir, read_endpoints, running_daemon_pid
    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.launcher.cli import job as job_cli
    from graphtier.launcher.cli.metrics import metrics
    from graphtier.launcher.client import DaemonClient
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
            prepared = {m.name: m for m in list_datasets(root)}
            if name in prepared:
                console.print(f"dataset {name} is already prepared under {root}")
            else:
                with console.status(f"preparing {name} (synthetic R-MAT, 2^{scale} nodes) under {root}"):
                    prepare_dataset(
                        PrepareConfig(
                            source="synthetic:rmat",
                            name=name,
                            undirected=True,
                            root=root,
                            source_options={"scale": scale},
                        )
                    )
                console.print(f"prepared {name}")
                prepared = {m.name: m for m in list_datasets(root)}
            with DaemonClient(runtime_dir=directory) as client:
                placement = demo_placement(_daemon_gpus(client), nproc_per_node)
                console.print(placement.summary)
                budgets = BudgetSpec(
                    num_devices=placement.num_devices, device_replicated="5%", device_interleaved="20%"
                )
                spec = JobSpec(
                    dataset=name,
                    model="sage",
                    fanouts=[10, 5],
                    batch_size=512,
                    hidden=64,
                    epochs=epochs,
                    nproc_per_node=placement.nproc_per_node,
                    device=placement.device,
                    name="demo",
                    budgets=budgets,
                )
                submitted = client.submit_job(spec)
                console.print(
                    f"submitted job [bold]{submitted.job_id}[/]: {placement.nproc_per_node}-rank "
                    f"GraphSAGE ({placement.device}) on {name}"
                )
                final = job_cli.follow(client, submitted.job_id)
            report_console.print(job_cli.describe(final), highlight=False, markup=False)
            report_console.print(reading_guide(prepared[name].num_classes), highlight=False, markup=False)
            metrics(runtime_dir=directory, json_out=False)
        finally:
            if popen is not None:
                _stop_daemon(popen)
                console.print(f"stopped graphtierd (pid {popen.pid})")
    if final.state.value != "succeeded":
        raise SystemExit(EXIT_JOB_FAILED)
