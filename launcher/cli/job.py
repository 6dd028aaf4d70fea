"""`graphtier job submit|status|list|logs|cancel|predict|score`: run training and inference jobs on the local
daemon, and score pairs with a link model's inference output."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from graphtier.contract.command_line import FlagTyper, GivenOptions, with_model_options
from graphtier.contract.inference import DEFAULT_CHUNK, DEFAULT_EMBEDDINGS
from graphtier.contract.jobs.spec import HOP_FIELDS, JobSpec
from graphtier.launcher.cli import job_report
from graphtier.launcher.cli.job_report import wrapped as _wrapped
from graphtier.launcher.cli.options import JsonOption, RuntimeDirOption, runtime_directory
from graphtier.launcher.cli.rendering import (
    EXIT_INTERRUPTED,
    console,
    emit_json,
    error_boundary,
    report_console,
)
from graphtier.launcher.client.job_document import document_of

if TYPE_CHECKING:
    from graphtier.contract.jobs.view import JobInfo, JobResultInfo
    from graphtier.launcher.client import DaemonClient

app = FlagTyper(help="Submit, follow and cancel training jobs.", no_args_is_help=True)


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


@app.command()
@with_model_options(JobSpec)
def submit(
    spec: Annotated[Path | None, typer.Option("--spec", help="YAML job spec; flags override its fields")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="follow the job to its end; exit with its status")] = False,
    runtime_dir: RuntimeDirOption = None,
    json_out: JsonOption = False,
    *,
    given: GivenOptions,
) -> None:
    """Submit a job (flags or --spec job.yaml) and print its id."""
    from graphtier.contract.jobs.script_defaults import DEFAULTS_NAME, script_defaults

    with error_boundary():
        values = given.values()
        # a nested model's flags (the tier budgets) refine what the spec file and the script's defaults give
        nested = {name: values.pop(name) for name in list(values) if isinstance(values[name], dict)}
        if spec is not None:
            job_spec = JobSpec.from_yaml(spec, **values)
        else:
            job_spec = JobSpec.build(values, source="command line")
        if job_spec.script:  # a spec file's script too, before anything runs
            script_path(Path(job_spec.script), "--script" if "script" in values else f"{spec}: script")
            defaults = script_defaults(Path(job_spec.script))  # the script's JOB_DEFAULTS under what was given
            if defaults:
                given_fields = job_spec.model_dump(include=job_spec.model_fields_set)
                if given_fields.keys() & HOP_FIELDS:  # the hops given replace the script's, in either form
                    defaults = {name: value for name, value in defaults.items() if name not in HOP_FIELDS}
                job_spec = JobSpec.build({**defaults, **given_fields}, source=f"{job_spec.script}: {DEFAULTS_NAME}")
        if nested:
            current = {name: getattr(job_spec, name) for name in nested}
            refined = {name: {**(now.model_dump() if now else {}), **nested[name]} for name, now in current.items()}
            job_spec = JobSpec.build({**job_spec.model_dump(), **refined}, source="command line")
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
def export(
    job_id: Annotated[str, typer.Argument(help="id of a succeeded job")],
    out: Annotated[
        Path, typer.Option("--out", help="directory to create with the model (must not exist, or be empty)")
    ],
    runtime_dir: RuntimeDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Copy a succeeded job's exported model (the best epoch's weights, the model's configuration, the dataset
    version) from the daemon into --out; load it with graphtier.loader.load_model(DIR)."""
    with error_boundary():
        with _client(runtime_dir) as client:
            manifest = client.export_job(job_id, out)
    if json_out:
        emit_json({"job_id": job_id, "out": str(out), "manifest": manifest.model_dump(mode="json")})
        return
    report_console.print(f"job {job_id}: {manifest.describe()}", highlight=False, markup=False, soft_wrap=True)
    how = f"exported to {out}; load it with graphtier.loader.load_model({str(out)!r})"
    console.print(how, highlight=False, markup=False, soft_wrap=True)


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


@app.command()
def predict(
    job_id: Annotated[str, typer.Argument(help="the succeeded job whose trained model to apply")],
    ids: Annotated[
        Path | None,
        typer.Option("--ids", help="a file of the source's node ids (.npy, or one a line); default: every node"),
    ] = None,
    embeddings: Annotated[
        str,
        typer.Option(
            "--embeddings",
            help="hidden: the last hidden layer; last-input: what the last layer's linear maps read (the logits "
            "are a linear function of it: a linear probe's input)",
        ),
    ] = DEFAULT_EMBEDDINGS,
    nproc_per_node: Annotated[int, typer.Option("--nproc-per-node", help="ranks, each a shard of every layer")] = 1,
    batch_size: Annotated[
        int, typer.Option("--batch-size", help="destination nodes per chunk of a layer")
    ] = DEFAULT_CHUNK,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda")] = "cpu",
    max_restarts: Annotated[int, typer.Option("--max-restarts", help="restarts of failed ranks, per layer")] = 0,
    name: Annotated[str, typer.Option("--name", help="shown by `job list`")] = "",
    wait: Annotated[bool, typer.Option("--wait", help="follow the job to its end; exit with its status")] = False,
    runtime_dir: RuntimeDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Submit an inference job: JOB_ID's model applied layer by layer, over every neighbour, to every node
    (or --ids), writing embeddings and predictions in the source's ids to the new job's predictions/."""
    from graphtier.contract.jobs.spec import JobSpec

    with error_boundary():
        with _client(runtime_dir) as client:
            source = client.get_job(job_id).spec
            values = {
                "dataset": source.dataset,
                "from_job": job_id,
                "embeddings": embeddings,
                "nproc_per_node": nproc_per_node,
                "batch_size": batch_size,
                "device": device,
                "max_restarts": max_restarts,
                "name": name or f"predict {job_id}",
            }
            if ids is not None:
                values["ids"] = script_path(ids, "--ids")
                if client.endpoints is not None:
                    _check_ids_file(ids, source.dataset, Path(client.endpoints.dataset_root))
            job = client.submit_job(JobSpec.build(values, source="command line"))
            if not wait:
                if json_out:
                    emit_json(job_dict(job))
                else:
                    out = job.log_path.removesuffix("job.log") + "predictions"
                    console.print(
                        f"submitted inference job [bold]{job.job_id}[/] ({job.spec.trains}); its output: {out}; "
                        f"follow it with `graphtier job status {job.job_id} --watch`"
                    )
                    typer.echo(job.job_id)
                return
            console.print(f"submitted inference job [bold]{job.job_id}[/]")
            job = follow(client, job.job_id, quiet=json_out)
        _finish(job, json_out)


def _check_ids_file(ids: Path, dataset: str, dataset_root: Path) -> None:
    """Refuse an --ids file the job would fail on (unreadable, empty, not integers, ids that are not the
    dataset's nodes) before it is submitted, as its ranks will read it: GraphtierError naming the file and
    the ids. Left to the job when this machine cannot open the daemon's datasets."""
    from graphtier.contract.errors import PreparedDatasetError
    from graphtier.launcher.runtime.inference_output import output_groups
    from graphtier.service.prepared import PreparedDataset

    try:
        prepared = PreparedDataset.open(dataset, dataset_root)
    except PreparedDatasetError:
        return  # another machine's daemon, or a dataset removed meanwhile: the job says
    output_groups(prepared, prepared.manifest.hetero, ids)


@app.command()
def score(
    job_id: Annotated[str, typer.Argument(help="an inference job of a link model (`job predict LINK_JOB`)")],
    pairs: Annotated[
        Path, typer.Option("--pairs", help="candidate pairs in the source's ids: two a line, or an [P, 2] .npy")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="a new file to write the scores to (.npy, added when missing); default: print them"),
    ] = None,
    runtime_dir: RuntimeDirOption = None,
) -> None:
    """Score candidate pairs with an inference job's node embeddings and its link model's decoder."""
    from graphtier.contract.errors import GraphtierError
    from graphtier.launcher.runtime.pair_scores import read_pairs_file, score_pairs

    with error_boundary():
        if out is not None:
            out = _new_npy_file(out)
        with _client(runtime_dir) as client:
            where, endpoints = client.runtime_dir, client.endpoints
            if endpoints is None:
                raise GraphtierError(f"no daemon at {where} to say where the job's dataset lives")
            job = client.get_job(job_id)
            if not job.spec.infers or job.state.value != "succeeded":
                raise GraphtierError(
                    f"job {job_id} is a {'succeeded' if job.state.value == 'succeeded' else job.state.value} "
                    f"{'inference' if job.spec.infers else 'training'} job: score pairs with a succeeded inference "
                    f"job of a link model (`graphtier job predict LINK_JOB`)"
                )
        candidates = read_pairs_file(pairs)
        scores = score_pairs(where, Path(endpoints.dataset_root), job_id, candidates).numpy()
        if out is not None:
            _write_new_npy(out, scores)
            console.print(f"scored {len(scores):,} pairs into {out}")
        else:
            for (u, v), value in zip(candidates.tolist(), scores.tolist(), strict=True):
                typer.echo(f"{u}\t{v}\t{value:.6g}")


def _new_npy_file(out: Path) -> Path:
    """`out` with `.npy` added when missing (as numpy names it); GraphtierError when something is there
    already (a file, a directory, a link): graphtier writes a new file, never over one it did not make."""
    from graphtier.contract.errors import GraphtierError

    out = out if out.suffix == ".npy" else out.with_name(f"{out.name}.npy")
    if out.exists() or out.is_symlink():
        raise GraphtierError(f"--out {out}: already exists; give a new file (nothing was written)")
    return out


def _write_new_npy(out: Path, array: Any) -> None:
    """`array` saved as the new file `out`: created exclusively (never through a link, never over a file made
    meanwhile) and removed again if writing it fails."""
    import numpy as np

    from graphtier.contract.errors import GraphtierError

    try:
        handle = open(out, "xb")  # closed below, and the file removed on failure
    except FileExistsError:
        raise GraphtierError(f"--out {out}: already exists; give a new file (nothing was written)") from None
    try:
        with handle:
            np.save(handle, array)
    except BaseException:
        out.unlink(missing_ok=True)
        raise
