"""Retention: a succeeded job leaves no checkpoint, an ended job's series fold away after the grace
period without lowering the daemon's totals, and it is still answered from the job store, its
totals in the status and its log read back from disk."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient, DaemonRequestError


def _graphtier(*args: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "graphtier.launcher.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        return reply.read().decode()


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_checkpoints_go_with_success_and_series_fold_away_after_the_grace(daemon_processes, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent, "--job-retire", "2")
    endpoints = daemon.start()
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=256, hidden=16, epochs=2, nproc_per_node=1)
    with DaemonClient(endpoints.grpc_target, http_url=endpoints.http_url) as client:
        job_id = client.submit_job(spec).job_id
        deadline = time.monotonic() + 180
        while not client.get_job(job_id).state.final and time.monotonic() < deadline:
            time.sleep(0.3)
        done = client.get_job(job_id)
        assert done.state == JobState.SUCCEEDED
        checkpoints = daemon.runtime_dir / "jobs" / job_id / "checkpoints"
        assert not list(checkpoints.glob("ckpt-*.pt"))  # removed on success (--keep-checkpoints keeps them)
        before = client.status()
        ended = next(j for j in before.jobs if j.job_id == job_id)
        assert ended.batches_total > 0 and ended.traffic.total_bytes > 0
        events = list(client.job_events(job_id, include_logs=True))
        logged = [e.log.text for e in events if e.log is not None and not e.log.from_producer]
        assert any(text.startswith("[rank 0]") for text in logged)
        assert f'job_id="{job_id}"' in _metrics(endpoints.http_url)
        deadline = time.monotonic() + 60
        while f'job_id="{job_id}"' in _metrics(endpoints.http_url) and time.monotonic() < deadline:
            time.sleep(0.5)
        text = _metrics(endpoints.http_url)
        assert f'job_id="{job_id}"' not in text and 'job_id="ended"' in text
        after = client.status()
        assert after.traffic.total_bytes == before.traffic.total_bytes  # folded, not lost
        assert after.batches_total == before.batches_total
        retired = next(j for j in after.jobs if j.job_id == job_id)
        assert (retired.batches_total, retired.traffic.total_bytes) == (ended.batches_total, ended.traffic.total_bytes)
        again = client.get_job(job_id)
        assert (again.state, again.result, again.spec) == (done.state, done.result, done.spec)
        # the log of a job no longer supervised is read back from jobs/<id>/job.log (torchrun and the
        # ranks; the producers' own logs went with their channel directories)
        read_back = [e.log for e in client.job_events(job_id, include_logs=True) if e.log is not None]
        assert [line.text for line in read_back] == logged
        assert {line.rank for line in read_back if line.text.startswith("[rank 0]")} == {0}
        shown = _graphtier("job", "logs", job_id, "--runtime-dir", daemon.runtime_dir)
        assert (shown.returncode, shown.stdout.splitlines()) == (0, logged), shown.stderr
        listed = _graphtier("metrics", "--json", "--runtime-dir", daemon.runtime_dir)
        assert listed.returncode == 0, listed.stderr
        row = next(j for j in json.loads(listed.stdout)["jobs"] if j["job_id"] == job_id)
        assert row["batches_total"] == ended.batches_total and row["traffic"]["total_bytes"] > 0
        assert row["ranks"] == []  # its trainers retired: their seconds are not held, and not shown as 0
        table = _graphtier("metrics", "--runtime-dir", daemon.runtime_dir)
        assert table.returncode == 0, table.stderr
        seconds = table.stdout[table.stdout.index("seconds by job") :].splitlines()
        assert any(line.split() == [job_id, "-", "-", "-", "-"] for line in seconds), table.stdout
        log_path = daemon.runtime_dir / "jobs" / job_id / "job.log"
        log_path.unlink()
        with pytest.raises(DaemonRequestError, match=f"job '{job_id}' has ended and its log .*job.log is gone"):
            list(client.job_events(job_id, include_logs=True))
        gone = _graphtier("job", "logs", job_id, "--runtime-dir", daemon.runtime_dir)
        assert gone.returncode == 1 and "job.log is gone" in gone.stderr, gone.stderr
