"""What a job leaves behind, end to end: a real daemon, real torchrun ranks, the real CLI.

A Cora job's exported model, fetched with `graphtier job export` (over gRPC) and rebuilt by
`load_model`, predicts the test nodes with full neighbourhoods and reproduces the job's reported
test accuracy at its best epoch exactly. A job that did not succeed, or an unknown one, is refused
naming why; the retention removes the oldest models and nothing else; the history is in `job status
--json`, survives a daemon restart, and is in the job's history.csv and TensorBoard events.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from graphtier.contract.jobs.artifact import artifact_dir, read_manifest
from graphtier.contract.jobs.directory import history_csv_path, tensorboard_dir
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient
from graphtier.launcher.runtime.evaluation import count_correct
from graphtier.launcher.runtime.local_batches import LocalBatchSource
from graphtier.loader import load_model
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.prepared.manifest import content_version
from graphtier.service.sampling import NeighborSampler

EVERY_NEIGHBOUR = [-1, -1]


@pytest.fixture(scope="module")
def cora(shared_datasets, prepared_root) -> PreparedDataset:
    if not (prepared_root / "cora").exists():
        prepare_dataset(
            PrepareConfig(
                source=f"planetoid:{shared_datasets / 'planetoid_cora'}",
                name="cora",
                undirected=True,
                root=prepared_root,
            )
        )
    return PreparedDataset.open("cora", prepared_root)


def _graphtier(runtime_dir: Path, *args: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "graphtier.launcher.cli", *map(str, args), "--runtime-dir", str(runtime_dir)]
    wide = {**os.environ, "COLUMNS": "500"}  # paths printed whole
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, env=wide)


def _finish(client: DaemonClient, job_id: str, timeout_s: float = 300.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get_job(job_id)
        if job.state.final:
            return job
        time.sleep(0.3)
    pytest.fail(f"job {job_id} did not end in {timeout_s} s")


def _cora_spec(**overrides) -> JobSpec:
    values = dict(
        dataset="cora", fanouts=[10, 10], eval_fanouts=EVERY_NEIGHBOUR, batch_size=64, hidden=32, epochs=6,
        lr=0.01, weight_decay=5e-4, nproc_per_node=2,
    )  # fmt: skip
    return JobSpec(**{**values, **overrides})


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_cora_jobs_exported_model_reproduces_its_test_accuracy(daemon_processes, cora, tmp_path):
    daemon = daemon_processes(cora.directory.parent)
    endpoints = daemon.start()
    with DaemonClient(endpoints.grpc_target) as client:
        job = _finish(client, client.submit_job(_cora_spec()).job_id)
    assert job.state == JobState.SUCCEEDED, f"{job.message}\n{Path(job.log_path).read_text()[-3000:]}"
    best = job.result.best
    assert best is not None and best.selected_by == "val_accuracy"

    out = tmp_path / "model"
    exported = _graphtier(daemon.runtime_dir, "job", "export", job.job_id, "--out", out)
    assert exported.returncode == 0, exported.stderr
    assert f"weights of epoch {best.epoch}, the best by val_accuracy {best.val_accuracy:.4f}" in exported.stdout
    manifest = read_manifest(out)
    assert (manifest.job_id, manifest.figures.best_epoch, manifest.figures.weights_epoch) == (
        job.job_id,
        best.epoch,
        best.epoch,
    )
    assert manifest.figures.best == {"val_accuracy": best.val_accuracy, "test_accuracy": best.test_accuracy}
    assert manifest.dataset.name == "cora" and manifest.dataset.num_nodes == 2708
    assert manifest.dataset.version == content_version(cora.manifest) == job.dataset_version
    assert (manifest.model.kind, manifest.model.task, manifest.model.layers, manifest.model.out_dim) == (
        "sage",
        "node",
        2,
        7,
    )

    model = load_model(out, device="cpu")
    assert not model.training
    # The job's evaluation batches: each rank's shard of the test ids (every 2nd id), in batches of 64,
    # every neighbour taken -- what its ranks evaluated at every epoch, so "exactly" is float equality.
    correct = labelled = 0
    for rank in (0, 1):
        source = LocalBatchSource(cora, [10, 10], 64, rank, 2, 0, eval_fanouts=EVERY_NEIGHBOUR)
        c, n = count_correct(model, source.eval_batches("test"), torch.device("cpu"))
        correct, labelled = correct + c, labelled + n
    assert labelled == 1000
    assert correct / labelled == best.test_accuracy

    # Predictions for every node of Cora, 512 at a time over full neighbourhoods, read on the test nodes.
    sampler = NeighborSampler(cora.graph, EVERY_NEIGHBOUR)
    predicted = torch.empty(cora.graph.num_nodes, dtype=torch.int64)
    with torch.no_grad():
        for seeds in torch.arange(cora.graph.num_nodes).split(512):
            sample = sampler.sample(seeds, seed=0)
            x = torch.as_tensor(cora.features[sample.node_ids.numpy()])
            predicted[seeds] = model(sample.blocks(), x)[: seeds.numel()].argmax(dim=1)
    test = cora.split("test")
    on_test = float((predicted[test] == cora.labels[test]).double().mean())
    print(
        f"cora job {job.job_id}: best epoch {best.epoch} val {best.val_accuracy:.4f} test {best.test_accuracy:.4f}; "
        f"exported model on the job's evaluation batches {correct}/{labelled}; all-node predictions on test "
        f"{on_test:.4f}"
    )
    assert on_test == best.test_accuracy

    shown = _graphtier(daemon.runtime_dir, "job", "status", job.job_id)
    assert f"graphtier job export {job.job_id} --out DIR" in shown.stdout + shown.stderr
    assert f"tensorboard --logdir \\\n      {tensorboard_dir(Path(job.log_path).parent)}\n" in shown.stdout


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_export_is_refused_naming_why_for_a_failed_or_unknown_job(daemon_processes, cora, tmp_path):
    daemon = daemon_processes(cora.directory.parent)
    endpoints = daemon.start()
    with DaemonClient(endpoints.grpc_target) as client:
        job = client.submit_job(_cora_spec(epochs=500, nproc_per_node=1))
        client.cancel_job(job.job_id, "stopped by the test")
        failed = _finish(client, job.job_id)
    assert failed.state == JobState.CANCELLED
    assert failed.artifact is not None and failed.artifact.state == "none"
    refused = _graphtier(daemon.runtime_dir, "job", "export", job.job_id, "--out", tmp_path / "m1")
    assert refused.returncode != 0
    assert f"job {job.job_id} cancelled (stopped by the test): only a succeeded job has an exported model" in (
        refused.stderr
    )
    assert not (tmp_path / "m1").exists()
    unknown = _graphtier(daemon.runtime_dir, "job", "export", "999", "--out", tmp_path / "m2")
    assert unknown.returncode != 0 and "no job '999' in this daemon" in unknown.stderr


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_refused_export_leaves_nothing_behind(daemon_processes, cora, tmp_path):
    """An export the daemon does not answer (stopped), or answers with a refusal, leaves neither its partial
    directory nor the folders it made for --out; a link as --out is refused, its target untouched."""
    daemon = daemon_processes(cora.directory.parent)
    endpoints = daemon.start()
    before = set(os.listdir(tmp_path))
    os.kill(endpoints.pid, signal.SIGSTOP)
    try:
        stopped = _graphtier(daemon.runtime_dir, "job", "export", "1", "--out", tmp_path / "made" / "m1")
    finally:
        os.kill(endpoints.pid, signal.SIGCONT)
    assert stopped.returncode == 1 and f"(pid {endpoints.pid}) is not answering" in stopped.stderr
    unknown = _graphtier(daemon.runtime_dir, "job", "export", "999", "--out", tmp_path / "made" / "deeper" / "m2")
    assert unknown.returncode != 0 and "no job '999' in this daemon" in unknown.stderr
    assert set(os.listdir(tmp_path)) == before  # no `made/`, no `.m1.partial-PID`
    target = tmp_path / "kept"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    linked = _graphtier(daemon.runtime_dir, "job", "export", "999", "--out", tmp_path / "link")
    assert linked.returncode == 2 and f"--out {tmp_path / 'link'}: a symbolic link" in linked.stderr  # bad input
    assert (tmp_path / "link").is_symlink() and target.is_dir() and not any(target.iterdir())


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_retention_removes_the_oldest_models_and_nothing_else(daemon_processes, cora, tmp_path):
    daemon = daemon_processes(cora.directory.parent, "--artifact-keep", "2")
    endpoints = daemon.start()
    spec = _cora_spec(epochs=1, nproc_per_node=1, eval_fanouts=[])
    jobs_dir = daemon.runtime_dir / "jobs"
    with DaemonClient(endpoints.grpc_target, http_url=endpoints.http_url) as client:
        ids = []
        for _ in range(3):
            ids.append(client.submit_job(spec).job_id)
            assert _finish(client, ids[-1]).state == JobState.SUCCEEDED
        first, second, third = ids
        before = {job_id: sorted(p.name for p in (jobs_dir / job_id).iterdir()) for job_id in ids}
        assert not artifact_dir(jobs_dir / first).exists()  # the oldest of three, with two kept
        assert artifact_dir(jobs_dir / second).is_dir() and artifact_dir(jobs_dir / third).is_dir()
        expired = client.get_job(first).artifact
        assert expired.state == "expired" and "only the newest 2 succeeded jobs' models are kept" in expired.message
        assert "job.log" in before[first] and "spec.json" in before[first] and "history.csv" in before[first]
        refused = _graphtier(daemon.runtime_dir, "job", "export", first, "--out", tmp_path / "old")
        assert refused.returncode != 0 and "removed by the daemon's artifact retention" in refused.stderr
        status = client.status().artifacts
        assert (status.keep_jobs, status.kept_jobs, status.expired_jobs) == (2, 2, 1)
        # a model that is a link to another job's files: removing it unlinks the link, the files stay
        victim = artifact_dir(jobs_dir / second)
        weights = sorted(p.name for p in victim.iterdir())
        shared = tmp_path / "someone-elses"
        victim.rename(shared)
        victim.symlink_to(shared, target_is_directory=True)
        fourth = client.submit_job(spec).job_id
        assert _finish(client, fourth).state == JobState.SUCCEEDED
        assert not victim.exists() and not victim.is_symlink()
        assert sorted(p.name for p in shared.iterdir()) == weights  # the link's target is untouched
        assert artifact_dir(jobs_dir / third).is_dir() and artifact_dir(jobs_dir / fourth).is_dir()
        assert sorted(p.name for p in (jobs_dir / second).iterdir()) == [n for n in before[second] if n != "artifact"]
    shown = _graphtier(daemon.runtime_dir, "cluster", "status")
    assert shown.returncode == 0, shown.stderr
    assert "exported models: 2 kept" in shown.stdout and "2 removed by the retention" in shown.stdout
    assert "the newest 2 succeeded jobs' models" in shown.stdout


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_history_is_in_status_json_survives_a_restart_and_is_in_csv_and_tensorboard(daemon_processes, cora, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec = _cora_spec(epochs=3, nproc_per_node=2, eval_fanouts=[])
    first = daemon_processes(cora.directory.parent)
    with DaemonClient(first.start().grpc_target) as client:
        job = _finish(client, client.submit_job(spec).job_id)
    assert job.state == JobState.SUCCEEDED, job.message
    shown = _graphtier(first.runtime_dir, "job", "status", job.job_id, "--json")
    history = json.loads(shown.stdout)["history"]
    assert [record["epoch"] for record in history] == [0, 1, 2]
    steps = job.progress.steps_per_epoch
    assert [record["step"] for record in history] == [steps, 2 * steps, 3 * steps]
    for record in history:
        assert record["train_loss"] > 0 and 0 <= record["train_accuracy"] <= 1
        assert record["batches_per_second"] > 0 and record["epoch_seconds"] > 0
        assert set(record["metrics"]) == {"val_accuracy", "test_accuracy"}
    last = history[-1]["metrics"]
    assert (last["val_accuracy"], last["test_accuracy"]) == (job.result.val_accuracy, job.result.test_accuracy)
    assert first.terminate() == 0

    second = daemon_processes(cora.directory.parent)
    second.start()
    again = _graphtier(second.runtime_dir, "job", "status", job.job_id, "--json")
    assert json.loads(again.stdout)["history"] == history  # kept in the job table

    job_dir = Path(job.log_path).parent
    with open(history_csv_path(job_dir)) as f:
        rows = list(csv.DictReader(f))
    assert [int(row["epoch"]) for row in rows] == [0, 1, 2]
    for row, record in zip(rows, history, strict=True):
        assert float(row["train_loss"]) == record["train_loss"]
        assert float(row["val_accuracy"]) == record["metrics"]["val_accuracy"]
        assert float(row["batches_per_second"]) == record["batches_per_second"]
    events = EventAccumulator(str(tensorboard_dir(job_dir)))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"train/loss", "train/accuracy", "eval/val_accuracy", "eval/test_accuracy"} <= set(tags)
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [0, 1, 2]
    assert [e.value for e in loss] == pytest.approx([r["train_loss"] for r in history], rel=1e-6)  # float32 there
