"""What `graphtier job status` and `job list` print, from job documents (`client.job_document`).

The one renderer of a job for people and machines: the Typer commands in `job.py` (`submit
--wait`, `status --watch`, `cancel`, `demo`) print through it too, and `entry.py` runs
`show_status` and `show_list` without building the Typer application. It loads no typer,
pydantic or contract model; rich only for `job list`'s table.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphtier.contract.jobs.directory import HISTORY_CSV, TENSORBOARD_DIR
from graphtier.contract.jobs.state import JobState
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import SOURCES, SourceTraffic, TrafficCounts
from graphtier.launcher.cli.plain import (
    EXIT_JOB_FAILED,
    emit_json,
    human_bytes,
    plain_errors,
    print_report,
    runtime_directory,
)

if TYPE_CHECKING:
    from graphtier.launcher.client import DaemonClient
    from graphtier.launcher.client.job_document import JobDocument

WIDTH = 80  # what a terminal is assumed to have: every line and table fits
UNSUCCESSFUL = frozenset(state.value for state in JobState if state.final and state != JobState.SUCCEEDED)
LIST_TITLE = (
    "jobs (val, test: the last epoch's accuracy, a link job's AUC marked auc; "
    "best: test at the best validation epoch, and that epoch)"
)


def client(runtime_dir: Path | None) -> DaemonClient:
    """A client of the daemon of `--runtime-dir` (None: the default one)."""
    from graphtier.launcher.client import DaemonClient

    return DaemonClient(runtime_dir=runtime_directory(runtime_dir))


def show_status(job_id: str, runtime_dir: Path | None = None, json_out: bool = False) -> None:
    """`graphtier job status ID [--json]`: the job now; exits EXIT_JOB_FAILED once it failed or was cancelled."""
    with plain_errors():
        with client(runtime_dir) as daemon:
            document = daemon.get_job_document(job_id)
    finish(document, json_out)


def show_list(runtime_dir: Path | None = None, json_out: bool = False) -> None:
    """`graphtier job list [--json]`: every job of the daemon, newest first."""
    with plain_errors():
        with client(runtime_dir) as daemon:
            documents = daemon.list_job_documents()
    if json_out:
        emit_json(documents)
        return
    if not documents:
        print_report("no jobs")
        return
    from graphtier.launcher.cli.rendering import compact_table, report_console

    named = any(document["spec"]["name"] for document in documents)
    columns = ["job", *(["name"] if named else []), "owner", "state", "dataset", "trains", "ranks", "step", "val"]
    columns.append("test")
    columns.append("best")
    table = compact_table(*columns, title=LIST_TITLE)
    for document in documents:
        spec, progress = document["spec"], document["progress"]
        table.add_row(
            document["job_id"],
            *([spec["name"]] if named else []),
            document["owner"]["name"] if document["owner"] else "-",
            document["state"],
            spec["dataset"],
            Path(spec["script"]).name if spec["script"] else _model_column(spec),
            str(spec["nproc_per_node"]),
            f"{progress['global_step']}/{progress['total_steps']}" if progress else "-",
            *result_columns(document["result"]),
            best_column(document["result"]),
        )
    report_console.print(table)


def finish(document: JobDocument, json_out: bool) -> None:
    """Print a job on stdout (JSON, or its description); EXIT_JOB_FAILED when it ended unsuccessful."""
    if json_out:
        emit_json(document)
    else:
        print_report(describe(document))
    if document["state"] in UNSUCCESSFUL:
        raise SystemExit(EXIT_JOB_FAILED)


def result_columns(result: dict[str, Any] | None) -> tuple[str, str]:
    """`job list`'s val and test cells: accuracy, or a link-prediction job's AUC."""
    if result is None:
        return "-", "-"
    if result["metrics"]:
        val, test = result["metrics"].get("val_auc", 0.0), result["metrics"].get("test_auc", 0.0)
        return f"{val:.4f} auc", f"{test:.4f} auc"
    return f"{result['val_accuracy']:.4f}", f"{result['test_accuracy']:.4f}"


def best_column(result: dict[str, Any] | None) -> str:
    """`job list`'s best cell: the test figure at the best validation epoch and that epoch (1-based), e.g.
    `0.8120 (4)`, a link job's `0.5500 h@50 (4)`; `-` without one."""
    best = result["best"] if result is not None else None
    if best is None:
        return "-"
    name, value = _best_test_figure(best)
    unit = f" {name.removeprefix('test_').replace('hits', 'h')}" if name != "test_accuracy" else ""
    return f"{value:.4f}{unit} ({best['epoch'] + 1})"


def _best_test_figure(best: dict[str, Any]) -> tuple[str, float]:
    """The test counterpart of the figure that picked the best epoch: test_accuracy, or e.g. test_hits@50."""
    if best["selected_by"] == "val_accuracy":
        return "test_accuracy", best["test_accuracy"]
    name = "test_" + best["selected_by"].removeprefix("val_")
    return name, best["metrics"].get(name, 0.0)


def _best_line(best: dict[str, Any], epochs: int) -> str:
    """The result at the best validation epoch, e.g. `at best val accuracy 0.8200 (epoch 4/5): test accuracy
    0.8120`; a link job's lists its test metrics."""
    picked, epoch = best["selected_by"], f"(epoch {best['epoch'] + 1}/{epochs})"
    if picked == "val_accuracy":
        return f"  at best val accuracy {best['val_accuracy']:.4f} {epoch}: test accuracy {best['test_accuracy']:.4f}"
    tests = "  ".join(f"{k} {v:.4f}" for k, v in sorted(best["metrics"].items()) if k.startswith("test_"))
    return f"  at best {picked} {best['metrics'].get(picked, 0.0):.4f} {epoch}: {tests}"


def wrapped(text: str, first: str = "  ", rest: str = "    ") -> list[str]:
    """`text` in lines of at most WIDTH columns, never breaking a word or at a hyphen."""
    return textwrap.wrap(
        text, WIDTH, initial_indent=first, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    ) or [first.rstrip()]


def _model_column(spec: dict[str, Any]) -> str:
    """`job list`'s model cell: the model, and the job whose model an inference job applies."""
    return f"{spec['model']} of {spec['from_job']}" if spec["from_job"] else spec["model"]


def trains(spec: dict[str, Any]) -> str:
    """What the job trains, for people: the built-in model's name or the script's file name (`JobSpec.trains`)."""
    if spec["from_job"]:
        return f"{spec['model']} of job {spec['from_job']} (inference)"
    return f"script {Path(spec['script']).name}" if spec["script"] else spec["model"]


def _storage_line(s: StorageCounters) -> str:
    """The storage tier's rows: how read, the window's share, and what the reads cost."""
    window = f", window {s.window}" if s.window else ""
    line = (
        f"storage tier ({s.mode}{window}): {s.rows:,} rows, {s.window_hit_ratio:.1%} from the window; "
        f"read {human_bytes(s.read_bytes)} in {s.requests:,} requests"
    )
    if s.read_row_bytes:
        line += f" ({s.read_amplification:.2f}x the rows' bytes)"
    if s.io_seconds > 0:
        line += f", {human_bytes(int(s.bandwidth))}/s at queue depth {s.queue_depth:.1f}"
    return line


def _link_task(spec: dict[str, Any]) -> str:
    """How a link-prediction job trains, for its status line."""
    return (
        f", link prediction ({spec['negatives']} {spec['negative_sampling']} negative(s) per edge, "
        f"{spec['decoder']} decoder)"
    )


def _traffic(progress: dict[str, Any]) -> TrafficCounts:
    traffic = progress["traffic"]
    return TrafficCounts(
        **{source: SourceTraffic(**traffic[source]) for source in SOURCES}, simulated=traffic["simulated"]
    )


def _curves_lines(job: JobDocument) -> list[str]:
    """The latest epoch's figures, where the curves are (history.csv, and the command that opens the
    TensorBoard events), and the state of the job's exported model."""
    lines: list[str] = []
    history = job["history"]
    if history:
        last = history[-1]
        figures = [f"loss {last['train_loss']:.4f}"] if last["train_loss"] is not None else []
        figures += [f"{name} {value:.4f}" for name, value in sorted(last["metrics"].items())]
        lines += wrapped(f"epoch {last['epoch'] + 1}: " + "  ".join(figures), first="  curves: ", rest="    ")
        if job["log_path"]:  # a path alone on its line (a terminal folds it, never wraps it): to copy and paste
            directory = Path(job["log_path"]).parent
            lines += [
                f"    {directory / HISTORY_CSV}",
                "    tensorboard --logdir \\",
                f"      {directory / TENSORBOARD_DIR}",
            ]
    artifact = job["artifact"]
    if artifact is not None and artifact["state"] == "kept":
        lines += wrapped(
            f"{artifact['message']} ({human_bytes(artifact['bytes'])}): graphtier job export {job['job_id']} --out DIR",
            first="  model: ",
            rest="    ",
        )
    elif artifact is not None and artifact["state"] == "expired":
        lines += wrapped(artifact["message"], first="  model: ", rest="    ")
    return lines


def describe(job: JobDocument) -> str:
    """One paragraph, each line within 80 columns: state, progress, result, message and notes."""
    spec = job["spec"]
    where = f" x {spec['nnodes']} nodes" if spec["nnodes"] > 1 else ""
    if spec["features"] == "partitioned":
        where += f", features partitioned ({spec['replicate']} on every node)"
    infers = bool(spec["from_job"])
    if infers:  # layer by layer over every neighbour: its epochs are the model's layers
        nodes = f"the nodes of {spec['ids']}" if spec["ids"] else "every node"
        what = f"{spec['nproc_per_node']} rank(s), {len(spec['fanouts'])} layer(s) over {nodes}"
    else:
        what = f"{spec['nproc_per_node']} rank(s){where}, {spec['epochs']} epoch(s), sampling on {spec['sampler']}" + (
            _link_task(spec) if spec["task"] == "link" else ""
        )
    lines = wrapped(f"job {job['job_id']} [{job['state']}] {trains(spec)} on {spec['dataset']}, {what}", first="")
    p = job["progress"]
    if p is not None and p["total_steps"]:
        done = min(p["global_step"], p["total_steps"])
        bar = "#" * int(30 * done / p["total_steps"])
        traffic, storage = _traffic(p), StorageCounters(**p["storage"])
        stage = f"epoch {p['epoch'] + 1}/{spec['epochs']}"
        if infers:
            stage = f"layer {p['epoch'] + 1}/{len(spec['fanouts'])}"
        lines.append(f"  [{bar:<30}] step {done}/{p['total_steps']}, {stage}")
        figures = "" if infers else f"loss {p['loss']:.4f}  train acc {p['train_accuracy']:.3f}  "
        lines.append(f"  {figures}{p['batches_per_second']:.1f} batches/s  gathered {human_bytes(traffic.total_bytes)}")
        if traffic.network.rows:
            lines.append(
                f"  network tier: {traffic.network.rows:,} rows, {human_bytes(traffic.network.bytes)} "
                "fetched from other nodes"
            )
        if storage.rows:
            lines += wrapped(_storage_line(storage), first="  ", rest="    ")
    r = job["result"]
    if infers:
        if r is not None:
            measured = dict(r["metrics"])
            for split in ("val", "test"):
                if r[f"{split}_accuracy"]:
                    measured[f"{split} accuracy"] = r[f"{split}_accuracy"]
            shown = "  ".join(f"{name} {value:.4f}" for name, value in sorted(measured.items()))
            lines += wrapped(f"  predictions' {shown}" if shown else "  no split to measure", first="", rest="  ")
            lines.append(f"  computed in {r['train_seconds']:.1f} s")
        if job["state"] == "succeeded":
            lines += wrapped(f"output {str(Path(job['log_path']).parent / 'predictions')}")
        r = None
    if r is not None and r["metrics"]:
        lines += wrapped(
            "  " + "  ".join(f"{name} {value:.4f}" for name, value in sorted(r["metrics"].items())), first="", rest="  "
        )
        lines.append(f"  final loss {r['final_loss']:.4f}  trained {r['train_seconds']:.1f} s")
    elif r is not None:
        lines.append(
            f"  val accuracy {r['val_accuracy']:.4f}  test accuracy {r['test_accuracy']:.4f}  "
            f"final loss {r['final_loss']:.4f}  trained {r['train_seconds']:.1f} s"
        )
    if r is not None and r["best"] is not None:
        lines += wrapped(_best_line(r["best"], spec["epochs"]), first="", rest="    ")
    for node in job["nodes"]:
        step = f", step {node['progress']['global_step']}" if node["progress"] else ""
        ranks = ",".join(str(rank["rank"]) for rank in node["ranks"]) or "-"
        lines += wrapped(
            f"node {node['node_rank']} {node['node']} ({node['address']}): job {node['job_id'] or '-'} "
            f"[{node['state']}] ranks {ranks}{step}" + (f": {node['message']}" if node["message"] else ""),
            first="  ",
            rest="      ",
        )
    lines += _curves_lines(job)
    if job["message"]:
        lines += wrapped(job["message"])
    if job["owner"] is not None:
        owner = job["owner"]
        lines += wrapped(f"owner {owner['name']}" + (f" (uid {owner['uid']})" if owner["uid"] is not None else ""))
    if job["gpu_share"] and spec["device"] == "cuda":
        lines += wrapped(job["gpu_share"], first="  GPU share: ", rest="    ")
    for note in job["notes"]:
        lines += wrapped(note, first="  note: ", rest="        ")
    lines += wrapped(f"log {job['log_path']}")
    return "\n".join(lines)
