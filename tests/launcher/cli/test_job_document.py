"""Job documents (launcher/client/job_document.py), read from the wire without pydantic, are exactly
the contract's job dumped as `--json` always printed it: same keys, same order, same values."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.evaluation import BestEvaluation
from graphtier.contract.identity import JobOwner
from graphtier.contract.jobs.conversions import job_from_proto, job_to_proto
from graphtier.contract.jobs.history import EpochRecord
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.contract.jobs.view import (
    JobArtifactInfo,
    JobInfo,
    JobNodeInfo,
    JobPlacementInfo,
    JobProgressInfo,
    JobResultInfo,
    RankInfo,
)
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import SourceTraffic, TrafficCounts
from graphtier.launcher.cli.job_report import describe
from graphtier.launcher.client.job_document import job_document, spec_fields

NOW = datetime(2026, 11, 25, 6, 55, 1, 123456, tzinfo=timezone.utc)


def contract_dump(job: JobInfo) -> dict[str, Any]:
    """The contract's job as JSON-able data: every dataclass field, the pydantic models in JSON mode."""
    out = {f.name: getattr(job, f.name) for f in dataclasses.fields(job)}
    out["spec"] = job.spec.model_dump(mode="json")
    out["state"] = job.state.value
    for name in ("progress", "result"):
        out[name] = dataclasses.asdict(out[name]) if out[name] is not None else None
    out["ranks"] = [dataclasses.asdict(rank) for rank in job.ranks]
    out["placement"] = job.placement.model_dump(mode="json") if job.placement is not None else None
    out["nodes"] = [{**dataclasses.asdict(n), "state": n.state.value} for n in job.nodes]
    out["history"] = [dataclasses.asdict(record) for record in job.history]
    out["artifact"] = dataclasses.asdict(job.artifact) if job.artifact is not None else None
    out["owner"] = dataclasses.asdict(job.owner) if job.owner is not None else None
    return out


PROGRESS = JobProgressInfo(
    epoch=2,
    step_in_epoch=3,
    steps_per_epoch=10,
    global_step=23,
    total_steps=40,
    loss=0.75,
    train_accuracy=0.5,
    batches_per_second=12.5,
    traffic=TrafficCounts(host=SourceTraffic(100, 51200), network=SourceTraffic(7, 3584), simulated=True),
    storage=StorageCounters(mode="direct", window=4, read_rows=9, read_bytes=36864, requests=3, io_seconds=0.5),
)
RANKS = [RankInfo(rank=0, trainer_pid=11, producer_pid=12, global_step=23, ready_slots=1, last_report=NOW), RankInfo(1)]

JOBS = {
    "node classification, done": JobInfo(
        job_id="7",
        spec=JobSpec(dataset="cora", model="gat", hidden=64, epochs=5, budgets=BudgetSpec(num_devices=1, host="50%")),
        state=JobState.SUCCEEDED,
        message="",
        created_at=NOW,
        started_at=NOW + timedelta(seconds=1),
        finished_at=NOW + timedelta(seconds=9),
        progress=PROGRESS,
        result=JobResultInfo(0.8, 0.75, 0.25, 8.5, "/ckpt/7.pt", best=BestEvaluation(3, "val_accuracy", 0.82, 0.78)),
        ranks=RANKS,
        exit_code=0,
        log_path="/run/jobs/7/job.log",
        notes=["a note"],
        gpu_share="producers use no GPU: a CPU job",
        history=[
            EpochRecord(0, 10, 1.5, 0.25, 20.0, 0.5, {"val_accuracy": 0.5, "test_accuracy": 0.4}),
            EpochRecord(1, 20, 0.75, None, 21.5, 0.45),
        ],
        artifact=JobArtifactInfo("kept", "sage (node), weights of epoch 0", 4096, "/run/jobs/7/artifact"),
        dataset_version="ab" * 32,
        owner=JobOwner("alice", 1000),
    ),
    "link prediction, failed": JobInfo(
        job_id="8",
        spec=JobSpec(dataset="cora-link", task="link", negatives=3, decoder="mlp", name="lp", seed=5, dropout=0.0),
        state=JobState.FAILED,
        message="rank 0 exited 1",
        created_at=NOW,
        result=JobResultInfo(
            metrics={"val_auc": 0.9, "test_mrr": 0.4},
            best=BestEvaluation.of(0, {"val_hits@50": 0.6, "test_hits@50": 0.55, "test_auc": 0.93}, "val_hits@50"),
        ),
        exit_code=1,
        restarts=2,
    ),
    "multi-node part, running": JobInfo(
        job_id="9",
        spec=JobSpec(
            dataset="rmat", nodes=["a:1", "b:2"], features="partitioned", replicate="5%", script="/x/train.py",
            args=["--layers", "3"],
        ),
        state=JobState.RUNNING,
        message="",
        created_at=NOW,
        progress=PROGRESS,
        placement=JobPlacementInfo(
            nnodes=2, node_rank=1, rdzv_endpoint="a:29500", rdzv_id="r9", coordinator="a:1",
            coordinator_job_id="3", local_addr="b", node_addresses=["a:1", "b:2"],
        ),
        nodes=[
            JobNodeInfo("a", "a:1", 0, job_id="3", state=JobState.RUNNING, progress=PROGRESS, ranks=RANKS),
            JobNodeInfo("b", "b:2", 1, message="starting"),
        ],
    ),
    "heterogeneous, pending": JobInfo(
        job_id="10",
        spec=JobSpec(dataset="acm", model="rgcn", relation_fanouts=["paper-cites-paper:5,paper-writes-author:3", "2"]),
        state=JobState.PENDING,
        message="",
        created_at=NOW,
    ),
}  # fmt: skip


@pytest.mark.parametrize("job", JOBS.values(), ids=JOBS.keys())
def test_a_document_is_the_contracts_job_dumped(job):
    wire = job_to_proto(job)
    document, expected = job_document(wire), contract_dump(job_from_proto(wire))
    assert json.dumps(document, indent=2, default=str) == json.dumps(expected, indent=2, default=str)
    assert all(len(line) <= 80 for line in describe(document).splitlines())


def test_the_documents_spec_fields_are_the_job_specs_in_its_order():
    assert spec_fields() == tuple(JobSpec.model_fields)


def test_a_description_is_printed_on_stdout_as_richs_console_prints_it(capsys, monkeypatch):
    """On a terminal, or where $COLUMNS gives a width, a path longer than it (the job's log) is folded at
    it, as rich prints; into a pipe or a file every line is written whole, so `grep` finds it."""
    import io

    from rich.console import Console

    from graphtier.launcher.cli.plain import print_report

    long_log = dataclasses.replace(JOBS["node classification, done"], log_path="/home/" + "x" * 100 + "/job.log")
    text = describe(job_document(job_to_proto(long_log)))
    for columns in ("", "0"):  # no width asked for: into the capture, a pipe, whole lines
        monkeypatch.setenv("COLUMNS", columns)
        print_report(text)
        captured = capsys.readouterr()
        assert captured.out == text + "\n" and captured.err == ""

    def folded_as_rich_at(width: int) -> None:
        print_report(text)
        rich = Console(file=io.StringIO(), width=width)
        rich.print(text, highlight=False, markup=False)
        assert capsys.readouterr().out == rich.file.getvalue()

    for width in (80, 200):
        monkeypatch.setenv("COLUMNS", str(width))
        folded_as_rich_at(width)
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(os, "get_terminal_size", lambda descriptor=1: os.terminal_size((120, 40)))
    folded_as_rich_at(120)
