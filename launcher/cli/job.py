"""`graphtier job submit|status|list|logs|cancel`: run training jobs on the local daemon."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from graphtier.launcher.cli import job_report
from graphtier.launcher.cli.job_report import wrapped as _wrapped
from graphtier.launcher.cli.options import JsonOption, RuntimeDirOption, runtime_directory
from graphtier.launcher.cli.rendering import (
    EXIT_INTERRUPTED,
    console,
    emit_json,
    error_boundary,
)
from graphtier.launcher.client.job_document import document_of

if TYPE_CHECKING:
    from graphtier.contract.jobs.view import JobInfo, JobResultInfo
    from graphtier.launcher.client import DaemonClient

app = typer.Typer(help="Submit, follow and cancel training jobs.", no_args_is_help=True)


def _client(runtime_dir: Path | None) -> DaemonClient:
    from graphtier.launcher.client import DaemonClient

    return DaemonClient(runtime_dir=runtime_directory(runtime_dir))


def job_dict(job: JobInfo) -> dict[str, Any]:
    """A job as plain JSON-able data (what `--json` prints)."""
    return document_of(job)


def describe(job: JobInfo) -> str:
    """One paragraph, each line within 80 columns: state, progress, result, message and notes."""
    return job_report.describe(document_of(job))


def follow(client: DaemonClient, job_id: str, *, quiet: bool = False) -> JobInfo:
    """Show a live progress bar until the job ends; Ctrl-C detaches (the job keeps running)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("job {task.fields[job]} {task.fields[state]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[figures]}"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )
    task = progress.add_task("", total=None, job=job_id, state="pending", figures="")
    try:
        with progress:
            for event in client.job_events(job_id, follow=True):
                if event.state_change is not None:
                    progress.update(task, state=event.state_change.current.value)
                elif event.progress is not None:
                    p = event.progress
                    figures = f"loss {p.loss:.4f} acc {p.train_accuracy:.3f} {p.batches_per_second:.1f} batches/s"
                    progress.update(task, total=p.total_steps or None, completed=p.global_step, figures=figures)
    except KeyboardInterrupt:
        console.print(
            f"[yellow]detached from job {job_id}; it keeps running.[/] Follow it again with "
            f"`graphtier job status {job_id} --watch`, stop it with `graphtier job cancel {job_id}`."
        )
        raise SystemExit(EXIT_INTERRUPTED) from None
    return client.get_job(job_id)


def _finish(job: JobInfo, json_out: bool) -> None:
    job_report.finish(document_of(job), json_out)


def script_path(script: Path, what: str = "--script") -> str:
    """The absolute path of a job's script; GraphtierError naming it unless it is a readable file."""
    from graphtier.contract.errors import GraphtierError

    resolved = Path(os.path.abspath(script.expanduser()))
    if not resolved.is_file():
        raise GraphtierError(f"{what} {script}: {'not a file' if resolved.exists() else 'no such file'}")
    if not os.access(resolved, os.R_OK):
        raise GraphtierError(f"{what} {script}: not readable")
    return str(resolved)


def split_nodes(text: str) -> list[str]:
    """--nodes a,b,c as a list; GraphtierError naming the value when a name is empty."""
    from graphtier.contract.errors import GraphtierError

    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise GraphtierError(f"--nodes {text!r}: give node names or HOST:PORT addresses separated by commas")
    return parts


def split_args(text: str) -> list[str]:
    """--script-args as a shell would split it."""
    import shlex

    from graphtier.contract.errors import GraphtierError

    try:
        return shlex.split(text)
    except ValueError as exc:
        raise GraphtierError(f"--script-args {text!r}: {exc}") from None


@app.command()
def submit(
    dataset: Annotated[str | None, typer.Option(help="prepared dataset to train on")] = None,
    model: Annotated[str | None, typer.Option(help="sage, gcn or gat; rgcn or hgt on a typed dataset")] = None,
    fanout: Annotated[
        str | None,
        typer.Option(
            help="neighbours per hop, e.g. 15,10,5 (-1 = all); on a typed dataset per relation, hops split by ';': "
            "'paper-written_by-author:10,...;5'"
        ),
    ] = None,
    batch_size: Annotated[int | None, typer.Option(help="seed nodes per batch per rank")] = None,
    hidden: Annotated[int | None, typer.Option(help="hidden width")] = None,
    heads: Annotated[int | None, typer.Option(help="attention heads (gat)")] = None,
    epochs: Annotated[int | None, typer.Option(help="passes over the train ids")] = None,
    lr: Annotated[float | None, typer.Option(help="Adam learning rate")] = None,
    dropout: Annotated[float | None, typer.Option(help="dropout in [0, 1)")] = None,
    weight_decay: Annotated[float | None, typer.Option(help="Adam L2 weight decay")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, or cuda (one GPU per rank)")] = None,
    nproc_per_node: Annotated[int | None, typer.Option(help="trainer ranks (torchrun --nproc-per-node)")] = None,
    nnodes: Annotated[
        int | None, typer.Option(help="nodes (daemons) the job spans: this one and its first peers")
    ] = None,
    nodes: Annotated[
        str | None, typer.Option(help="the nodes by name or HOST:PORT, this one among them: a,b,c")
    ] = None,
    checkpoint_every_steps: Annotated[int | None, typer.Option(help="0 = at epoch ends only")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of shuffles, samplers and init")] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option(
            help="restarts from the newest checkpoint: of failed ranks (torchrun --max-restarts), or of a "
            "multi-node job on the nodes that remain after a lost node"
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="a name shown by `job list`")] = None,
    script: Annotated[
        Path | None, typer.Option(help="your own training script, run under torchrun (see examples/)")
    ] = None,
    script_args: Annotated[
        str | None, typer.Option(help="the script's arguments, one string: '--layers 3 --tag x'")
    ] = None,
    num_devices: Annotated[
        int | None, typer.Option(help="devices the device tiers span (0: every row on host)")
    ] = None,
    device_replicated: Annotated[str | None, typer.Option(help="feature bytes on every device: 5% or 512MiB")] = None,
    device_interleaved: Annotated[str | None, typer.Option(help="feature bytes spread over the devices")] = None,
    host_budget: Annotated[str | None, typer.Option(help="feature bytes in host memory (default: the rest)")] = None,
    structure_device: Annotated[
        str | None,
        typer.Option(help="structure bytes (CSC lists of the hottest nodes) on every device: 10% or 256MiB"),
    ] = None,
    storage_reads: Annotated[
        str | None, typer.Option(help="storage-tier rows: mmap (default), direct (O_DIRECT) or page-cache")
    ] = None,
    window: Annotated[
        int | None,
        typer.Option(help="look-ahead window: batches sampled ahead, storage rows read early and once; 0 = off"),
    ] = None,
    on_nonfinite: Annotated[
        str | None,
        typer.Option(help="a NaN/inf loss or gradient: fail (default, naming rank and step), skip-step or off"),
    ] = None,
    features: Annotated[
        str | None,
        typer.Option(
            help="multi-node feature rows: replicated (default: every node holds all) or partitioned "
            "(split across nodes, the hottest --replicate on every node, the rest fetched per batch)"
        ),
    ] = None,
    sampler: Annotated[
        str | None,
        typer.Option(
            help="where producers sample: cpu, gpu (device cuda only) or auto "
            "(default: gpu on a cuda job with structure on the device, else cpu)"
        ),
    ] = None,
    mps: Annotated[
        str | None,
        typer.Option(
            help="how cuda producers keep to --producer-sm-share: use (a running MPS control daemon), manage "
            "(the daemon runs its own while jobs need it), off (a capped grid) or auto (default: use where a "
            "control daemon answers, else off)"
        ),
    ] = None,
    producer_sm_share: Annotated[
        float | None,
        typer.Option(
            help="percent of each GPU's SMs a producer may use, in (0, 100] (default 10): "
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE under MPS, else the grid of its kernels"
        ),
    ] = None,
    replicate: Annotated[
        str | None,
        typer.Option(
            help="with --features partitioned: the rows, hottest first, on every node: "
            "a share (10%, 0.1; default 10%) or feature bytes per node (512MiB)"
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            help="node (default: node classification) or link (link prediction over the dataset's "
            "--edge-split: batches of train edges and sampled negatives; AUC, MRR and Hits@50)"
        ),
    ] = None,
    negatives: Annotated[int | None, typer.Option(help="link: negative pairs per positive edge (default 1)")] = None,
    negative_sampling: Annotated[
        str | None,
        typer.Option(help="link: uniform (default: random pairs) or corrupt-tail (the source, random tails)"),
    ] = None,
    decoder: Annotated[
        str | None,
        typer.Option(
            help="link: dot (default: dot product of the embeddings), mlp, mlp+cn (an MLP also fed the "
            "pair's common neighbours, Adamic-Adar and resource allocation over the training graph), or "
            "mlp+cn+aa (mlp+cn plus the pair's Adamic-Adar, weighted by validation Hits@50)",
        ),
    ] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="YAML job spec; flags override its fields")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="follow the job to its end; exit with its status")] = False,
    runtime_dir: RuntimeDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Submit a job (flags or --spec job.yaml) and print its id."""
    from graphtier.contract.hetero import split_fanout_hops
    from graphtier.contract.jobs.script_defaults import DEFAULTS_NAME, script_defaults
    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.launcher.cli.dataset import parse_fanouts

    with error_boundary():
        typed_fanout = fanout is not None and (":" in fanout or ";" in fanout)
        budgets = {
            "num_devices": num_devices,
            "device_replicated": device_replicated,
            "device_interleaved": device_interleaved,
            "host": host_budget,
            "structure_device": structure_device,
        }
        flags = {
            "dataset": dataset,
            "model": model,
            "fanouts": parse_fanouts(fanout) if fanout and not typed_fanout else None,
            "relation_fanouts": split_fanout_hops(fanout) if fanout and typed_fanout else None,
            "batch_size": batch_size,
            "hidden": hidden,
            "heads": heads,
            "epochs": epochs,
            "lr": lr,
            "dropout": dropout,
            "weight_decay": weight_decay,
            "device": device,
            "nproc_per_node": nproc_per_node,
            "checkpoint_every_steps": checkpoint_every_steps,
            "seed": seed,
            "max_restarts": max_restarts,
            "name": name,
            "script": script_path(script) if script else None,
            "nnodes": nnodes,
            "nodes": split_nodes(nodes) if nodes is not None else None,
            "args": split_args(script_args) if script_args is not None else None,
            "storage_reads": storage_reads,
            "window": window,
            "on_nonfinite": on_nonfinite,
            "features": features,
            "replicate": replicate,
            "sampler": sampler,
            "mps": mps,
            "producer_sm_share": producer_sm_share,
            "task": task,
            "negatives": negatives,
            "negative_sampling": negative_sampling,
            "decoder": decoder,
        }
        if spec is not None:
            job_spec = JobSpec.from_yaml(spec, **flags)
        else:
            job_spec = JobSpec.build({k: v for k, v in flags.items() if v is not None}, source="command line")
        if job_spec.script:
            script_path(Path(job_spec.script), f"{spec}: script")  # a spec file's script too, before anything runs
            defaults = script_defaults(Path(job_spec.script))  # the script's JOB_DEFAULTS under what was given
            if defaults:
                given = job_spec.model_dump(include=job_spec.model_fields_set)
                job_spec = JobSpec.build({**defaults, **given}, source=f"{job_spec.script}: {DEFAULTS_NAME}")
        if any(v is not None for v in budgets.values()):
            given = job_spec.budgets.model_dump() if job_spec.budgets else {}
            merged = {**given, **{k: v for k, v in budgets.items() if v is not None}}
            job_spec = JobSpec.build({**job_spec.model_dump(), "budgets": merged}, source="command line")
        with _client(runtime_dir) as client:
            job = client.submit_job(job_spec)
            if not json_out:
                for note in job.notes:
                    console.print(
                        "\n".join(_wrapped(note, first="note: ", rest="      ")), highlight=False, markup=False
                    )
            if not wait:
                if json_out:
                    emit_json(job_dict(job))
                else:
                    console.print(
                        f"submitted job [bold]{job.job_id}[/] ({job_spec.trains} on {job_spec.dataset}); "
                        f"follow it with `graphtier job status {job.job_id} --watch`"
                    )
                    typer.echo(job.job_id)
                return
            console.print(f"submitted job [bold]{job.job_id}[/]")
            job = follow(client, job.job_id, quiet=json_out)
        _finish(job, json_out)


@app.command()
def status(
    job_id: Annotated[str, typer.Argument(help="job id")],
    watch: Annotated[bool, typer.Option("--watch", help="live progress bar until the job ends")] = False,
    runtime_dir: RuntimeDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """State, progress and (once done) the final accuracies of one job."""
    if not watch:
        job_report.show_status(job_id, runtime_dir, json_out)
        return
    with error_boundary():
        with _client(runtime_dir) as client:
            job = client.get_job(job_id)
            if not job.state.final:
                job = follow(client, job_id, quiet=json_out)
        _finish(job, json_out)


@app.command("list")
def list_jobs(runtime_dir: RuntimeDirOption = None, json_out: JsonOption = False) -> None:
    """Every job of the daemon, newest first."""
    job_report.show_list(runtime_dir, json_out)


def _result_columns(result: JobResultInfo | None) -> tuple[str, str]:
    """`job list`'s val and test cells: accuracy, or a link-prediction job's AUC."""
    return job_report.result_columns(dataclasses.asdict(result) if result is not None else None)


@app.command()
def logs(
    job_id: Annotated[str, typer.Argument(help="job id")],
    follow_logs: Annotated[bool, typer.Option("--follow", "-f", help="keep printing until the job ends")] = False,
    node: Annotated[str, typer.Option("--node", help="a multi-node job's part on this node (name or HOST:PORT)")] = "",
    runtime_dir: RuntimeDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """The output of the job's ranks, torchrun and producers (one JSON object per line with --json)."""
    import json

    with error_boundary():
        with _client(runtime_dir) as client:
            try:
                for event in client.job_events(job_id, follow=follow_logs, include_logs=True, node=node):
                    line = event.log
                    if line is None:
                        continue
                    if json_out:
                        typer.echo(json.dumps({"sequence": event.sequence, **dataclasses.asdict(line)}))
                    else:
                        typer.echo(line.text)
            except KeyboardInterrupt:
                console.print(f"[yellow]stopped following job {job_id}; it keeps running[/]")
                raise SystemExit(EXIT_INTERRUPTED) from None


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="job id")],
    reason: Annotated[str, typer.Option(help="recorded in the job's message")] = "cancelled from the command line",
    runtime_dir: RuntimeDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Stop a job: torchrun, its ranks and producers; returns once they are gone."""
    with error_boundary():
        with _client(runtime_dir) as client:
            job = client.cancel_job(job_id, reason)
    if json_out:
        emit_json(job_dict(job))
    else:
        console.print(f"job {job.job_id} {job.state.value}: {job.message}")
