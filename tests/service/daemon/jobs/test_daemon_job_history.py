"""Jobs outlive their daemon: a restart keeps every job's state and result, a job whose daemon was
killed is marked failed with that cause, and ids are never reused."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

import pytest

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient

SHORT = dict(dataset="rmat12", fanouts=[5, 5], batch_size=256, hidden=16, epochs=1, nproc_per_node=1)


def _wait(client, job_id, states, timeout_s=180.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = client.get_job(job_id)
        if job.state in states:
            return job
        time.sleep(0.3)
    pytest.fail(f"job {job_id} not in {states} after {timeout_s} s: {client.get_job(job_id)}")


def test_history_survives_restart_and_kill9_and_ids_are_not_reused(daemon_processes, small_rmat):
    first = daemon_processes(small_rmat.directory.parent)
    with DaemonClient(first.start().grpc_target) as client:
        done = _wait(client, client.submit_job(JobSpec(**SHORT, name="kept")).job_id, {JobState.SUCCEEDED})
    assert done.result is not None
    assert first.terminate() == 0

    second = daemon_processes(small_rmat.directory.parent)
    with DaemonClient(second.start().grpc_target) as client:
        again = client.get_job(done.job_id)
        assert (again.state, again.spec, again.result) == (JobState.SUCCEEDED, done.spec, done.result)
        assert [j.job_id for j in client.list_jobs()] == [done.job_id]
        running = client.submit_job(JobSpec(**{**SHORT, "epochs": 500}, name="doomed"))
        assert running.job_id == str(int(done.job_id) + 1)
        _wait(client, running.job_id, {JobState.RUNNING})
    second.kill9()

    third = daemon_processes(small_rmat.directory.parent)
    with DaemonClient(third.start().grpc_target) as client:
        orphan = client.get_job(running.job_id)
        assert orphan.state == JobState.FAILED
        assert f"the daemon (pid {second.pid}) ended while the job was running" in orphan.message
        assert orphan.spec.name == "doomed"
        assert client.get_job(done.job_id).state == JobState.SUCCEEDED
        failed = client.list_jobs(states=[JobState.FAILED])
        assert [j.job_id for j in failed] == [running.job_id]
    assert f"job {running.job_id} was unfinished when its daemon ended" in third.log()
    assert third.terminate() == 0


def _figures(client, job_id):
    """The status's figures of one job, and whether the daemon still tracks its ranks."""
    (job,) = [j for j in client.status().jobs if j.job_id == job_id]
    figures = (job.batches_total, job.traffic.total_rows, job.traffic.total_bytes, job.val_accuracy, job.test_accuracy)
    return figures, bool(job.ranks)


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_an_ended_job_keeps_its_figures_once_retired_and_under_the_next_daemon(daemon_processes, small_rmat):
    # --job-retire 0: the job is retired (answered from its saved message, its trainers forgotten) at the
    # first sweep after it ends; the status must show what it trained, not zeros, then and after a restart
    first = daemon_processes(small_rmat.directory.parent, "--job-retire", "0")
    endpoints = first.start()
    with DaemonClient(endpoints.grpc_target, http_url=endpoints.http_url) as client:
        done = _wait(client, client.submit_job(JobSpec(**SHORT)).job_id, {JobState.SUCCEEDED})
        live, tracked = _figures(client, done.job_id)
        retired = live  # already retired when first read (the sweep can come first): the figures must not be zeros
        deadline = time.monotonic() + 30
        while tracked and time.monotonic() < deadline:
            time.sleep(0.5)
            retired, tracked = _figures(client, done.job_id)
        assert not tracked, "the job was not retired within 30 s"
    batches, rows, nbytes, val, test = live
    assert batches > 0 and rows > 0 and nbytes > 0 and val is not None and test is not None, live
    assert retired == live
    assert first.terminate() == 0

    second = daemon_processes(small_rmat.directory.parent)
    endpoints = second.start()
    with DaemonClient(endpoints.grpc_target, http_url=endpoints.http_url) as client:
        assert _figures(client, done.job_id) == (live, False)
    assert second.terminate() == 0


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_job_store_from_a_newer_graphtier_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    with sqlite3.connect(state / "jobs.sqlite3") as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema_version', '99')")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(tmp_path / "run"),
            "--dataset-root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "job store schema 99 is newer than this graphtier's (2)" in result.stderr
