"""Jobs end to end: a real daemon, real producers, real torchrun with 2 gloo ranks."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from best_epoch_checks import check_best_epoch

from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient
from graphtier.service.shm.naming import process_start_time
from graphtier.v1 import jobs_pb2

FINAL_TIMEOUT_S = 120.0


def _alive(pid: int) -> bool:
    return pid > 0 and process_start_time(pid) is not None


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def _client(daemon) -> DaemonClient:
    return DaemonClient(runtime_dir=daemon.config.runtime_dir)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_two_rank_job_succeeds_and_reports_accuracy(inproc_daemon):
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=128, hidden=32, epochs=2, nproc_per_node=2, name="ok")
    with _client(inproc_daemon) as client:
        job = client.submit_job(spec)
        assert job.state in (JobState.PENDING, JobState.STARTING) and job.spec == spec
        events = list(client.job_events(job.job_id, follow=True, include_logs=True))
        final = client.get_job(job.job_id)
        replay = list(client.job_events(job.job_id, from_sequence=3))

    assert final.state == JobState.SUCCEEDED, f"{final.message}\n{open(final.log_path).read()[-3000:]}"
    assert final.exit_code == 0 and final.finished_at is not None and final.started_at is not None
    assert (
        final.result is not None and 0.0 < final.result.val_accuracy <= 1.0 and 0.0 < final.result.test_accuracy <= 1.0
    )
    check_best_epoch(final)  # the figures at the best validation epoch, as the log printed that epoch's
    # a succeeded job's checkpoints are removed (graphtierd --keep-checkpoints keeps them): no path to a gone file
    assert final.result.checkpoint_path == ""
    assert not list((inproc_daemon.config.runtime_dir / "jobs" / job.job_id / "checkpoints").glob("ckpt-*.pt"))
    p = final.progress
    assert p is not None and p.total_steps == 2 * p.steps_per_epoch and p.global_step == p.total_steps
    assert p.traffic.total_bytes > 0  # the producers gathered the features
    assert sorted(r.rank for r in final.ranks) == [0, 1] and all(r.global_step == p.total_steps for r in final.ranks)

    assert [e.sequence for e in events] == list(range(len(events)))
    states = [e.state_change.current for e in events if e.state_change]
    assert states == [JobState.PENDING, JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED]
    assert events[-1].state_change.result == final.result  # the final event carries the accuracy
    assert any(e.progress and e.progress.global_step > 0 for e in events)
    logs = [e.log for e in events if e.log]
    assert any(line.rank == 0 and "[rank 0] done" in line.text for line in logs)
    assert any(line.from_producer and line.rank == 1 for line in logs)
    assert [e.sequence for e in replay] == [e.sequence for e in events if e.sequence >= 3 and e.log is None]

    for rank in final.ranks:  # nothing of the job is left running
        assert not _alive(rank.trainer_pid) and not _alive(rank.producer_pid)
    status = inproc_daemon.tracker.ranks(job.job_id)
    assert status[0].trainer.val_accuracy == final.result.val_accuracy
    assert status[0].trainer.best == final.result.best
    assert status[0].trainer.model_bytes > 0  # parameters + gradients + Adam state
    for rank in (0, 1):  # the producers' sample sizes reach the status and the metrics
        producer = status[rank].producer
        assert producer.batches_total == p.total_steps and 0 < producer.seeds_total <= 128 * producer.batches_total
        assert producer.sampled_nodes_total >= producer.seeds_total and producer.sampled_edges_total > 0
        exported = inproc_daemon.metrics.sample("graphtier_sampled_nodes_total", job_id=job.job_id, rank=str(rank))
        assert exported == producer.sampled_nodes_total


def test_unknown_dataset_and_bad_specs_fail_at_submit(inproc_daemon, tmp_path):
    with _client(inproc_daemon) as client:
        with pytest.raises(DaemonRequestError, match=r"no prepared dataset 'nope'.*\[NOT_FOUND\]"):
            client.submit_job(JobSpec(dataset="nope"))
        wire = jobs_pb2.SubmitJobRequest(
            spec=jobs_pb2.JobSpec(dataset="rmat12", model=jobs_pb2.MODEL_GAT, hidden=30, heads=4, dropout=1.5)
        )
        with pytest.raises(DaemonRequestError, match=r"dropout: .*less than 1.*hidden=30 must be divisible|dropout"):
            client._call(client._jobs.SubmitJob, wire)
        with pytest.raises(DaemonRequestError, match=r"SubmitJob: invalid job spec: .*model.*\[INVALID_ARGUMENT\]"):
            client._call(client._jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(dataset="rmat12")))
        too_many = torch.cuda.device_count() + 1
        with pytest.raises(
            DaemonRequestError,
            match=rf"device 'cuda' needs one CUDA device per rank.*sees "
            rf"{too_many - 1} for nproc_per_node {too_many}.*\[INVALID_ARGUMENT\]",
        ):
            client.submit_job(JobSpec(dataset="rmat12", device="cuda", nproc_per_node=too_many))
        with pytest.raises(DaemonRequestError, match=r"weight_decay: .*greater than or equal to 0"):
            client._call(
                client._jobs.SubmitJob,
                jobs_pb2.SubmitJobRequest(
                    spec=jobs_pb2.JobSpec(dataset="rmat12", model=jobs_pb2.MODEL_SAGE, weight_decay=-1.0)
                ),
            )
        assert client.list_jobs() == []  # nothing was started
        with pytest.raises(DaemonRequestError, match=r"no job '42'.*\[NOT_FOUND\]"):
            client.get_job("42")
        with pytest.raises(DaemonRequestError, match=r"no job '42'.*\[NOT_FOUND\]"):
            list(client.job_events("42"))

    from graphtier.contract.errors import InvalidRequestError

    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("dataset: rmat12\nfanout: [5, 5]\nbatch_size: 0\n")
    with pytest.raises(
        InvalidRequestError,
        match=r"job.yaml: invalid job spec: batch_size: .*greater than or equal "
        r"to 1.*fanout: Extra inputs are not permitted",
    ):
        JobSpec.from_yaml(spec_file)
    with pytest.raises(InvalidRequestError, match="fanouts: .*0"):
        JobSpec.build({"dataset": "d", "fanouts": [0]})


def _running(client: DaemonClient, job_id: str):
    job = client.get_job(job_id)
    if job.state.final:
        pytest.fail(f"job {job_id} ended early: {job.state.value} {job.message}")
    return (
        job if job.state == JobState.RUNNING and len(job.ranks) == 2 and all(r.trainer_pid for r in job.ranks) else None
    )


def test_cancel_and_killed_producer_on_one_shared_dataset(inproc_daemon):
    """Two jobs share rmat12's tiers; one is cancelled, the other loses a producer to kill -9."""
    long = dict(dataset="rmat12", fanouts=[5, 5], batch_size=16, hidden=16, epochs=500, nproc_per_node=2)
    with _client(inproc_daemon) as client:
        doomed = client.submit_job(JobSpec(**long, name="cancel-me"))
        victim = client.submit_job(JobSpec(**long, name="kill-a-producer"))
        assert [d.name for d in client.list_datasets()] == ["rmat12"]  # one copy for both jobs
        running = _wait_for(lambda: _running(client, doomed.job_id), FINAL_TIMEOUT_S, "job to run")
        _wait_for(lambda: _running(client, victim.job_id), FINAL_TIMEOUT_S, "job to run")
        pids = [r.trainer_pid for r in running.ranks] + [r.producer_pid for r in running.ranks]
        torchrun = inproc_daemon.job_manager._jobs[doomed.job_id].runner.torchrun.pid

        cancelled = client.cancel_job(doomed.job_id, "test says stop")
        assert cancelled.state == JobState.CANCELLED and cancelled.message == "test says stop"
        assert not any(_alive(pid) for pid in [*pids, torchrun])
        assert not [n for n in os.listdir("/dev/shm") if any(f"graphtier.{pid}." in n for pid in pids)]
        with pytest.raises(DaemonRequestError, match=r"already ended \(cancelled\).*\[FAILED_PRECONDITION\]"):
            client.cancel_job(doomed.job_id)

        victim_job = client.get_job(victim.job_id)
        assert victim_job.state == JobState.RUNNING  # the other job on the same tiers goes on
        producer = next(r.producer_pid for r in victim_job.ranks if r.rank == 1)
        os.kill(producer, signal.SIGKILL)
        failed = _wait_for(lambda: (j := client.get_job(victim.job_id)).state.final and j, 60, "the job to fail")
        assert failed.state == JobState.FAILED
        assert f"producer pid {producer} of rank 1 was killed by signal 9 (SIGKILL)" in failed.message
        others = [r.trainer_pid for r in failed.ranks] + [r.producer_pid for r in failed.ranks]
        assert not any(_alive(pid) for pid in others)
        assert not [n for n in os.listdir("/dev/shm") if f"graphtier.{producer}." in n]  # reclaimed
        assert inproc_daemon.jobs.jobs_using("rmat12") == []


def test_a_stalled_producer_fails_its_job_naming_it(make_inproc_daemon):
    """SIGSTOP a producer mid-job: no hang; the job fails within the stall timeout, naming the producer."""
    daemon = make_inproc_daemon(producer_stall_timeout_s=6.0)
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=16, hidden=16, epochs=500, nproc_per_node=2)
    with _client(daemon) as client:
        job = client.submit_job(spec)
        running = _wait_for(lambda: _running(client, job.job_id), FINAL_TIMEOUT_S, "job to run")
        stalled = next(r.producer_pid for r in running.ranks if r.rank == 0)
        others = [r.trainer_pid for r in running.ranks] + [r.producer_pid for r in running.ranks]
        os.kill(stalled, signal.SIGSTOP)
        stopped_at = time.monotonic()
        failed = _wait_for(lambda: (j := client.get_job(job.job_id)).state.final and j, 60, "the job to fail")
        waited = time.monotonic() - stopped_at
    assert failed.state == JobState.FAILED
    assert f"producer pid {stalled} of rank 0 is alive but has shown no progress" in failed.message
    assert "stall timeout 6 s" in failed.message and waited >= 6.0
    assert not any(_alive(pid) for pid in others)  # the stopped producer too: SIGTERM + SIGCONT
    assert not [n for n in os.listdir("/dev/shm") if any(f"graphtier.{pid}." in n for pid in others)]


def test_a_killed_rank_is_restarted_by_torchrun_and_resumes(inproc_daemon):
    """torchrun --max-restarts restarts the ranks; each re-opens its channel and gets a fresh producer."""
    spec = JobSpec(
        dataset="rmat12",
        fanouts=[5, 5],
        batch_size=32,
        hidden=16,
        epochs=30,  # 210 steps: on a fast CPU two epochs ended before the rank could be killed
        nproc_per_node=2,
        checkpoint_every_steps=3,
        max_restarts=1,
    )
    with _client(inproc_daemon) as client:
        job = client.submit_job(spec)
        running = _wait_for(
            lambda: (j := _running(client, job.job_id)) and j.progress.global_step >= 4 and j,
            FINAL_TIMEOUT_S,
            "a few steps",
        )
        first_producers = {r.producer_pid for r in running.ranks}
        os.kill(running.ranks[1].trainer_pid, signal.SIGKILL)
        final = _wait_for(lambda: (j := client.get_job(job.job_id)).state.final and j, FINAL_TIMEOUT_S, "the end")
    assert final.state == JobState.SUCCEEDED, final.message
    assert final.restarts == 1 and final.progress.global_step == final.progress.total_steps
    assert first_producers.isdisjoint(r.producer_pid for r in final.ranks)  # fresh producers after the restart
    assert final.result is not None and final.result.val_accuracy > 0
