"""Retention: a succeeded job leaves no checkpoint, an ended job's series fold away after the grace
period without lowering the daemon's totals, and it is still answered from the job store."""

from __future__ import annotations

import time
import urllib.request

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        return reply.read().decode()


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
        before = client.status().traffic.total_bytes
        assert f'job="{job_id}"' in _metrics(endpoints.http_url)
        deadline = time.monotonic() + 60
        while f'job="{job_id}"' in _metrics(endpoints.http_url) and time.monotonic() < deadline:
            time.sleep(0.5)
        text = _metrics(endpoints.http_url)
        assert f'job="{job_id}"' not in text and 'job="ended"' in text
        assert client.status().traffic.total_bytes == before  # folded, not lost
        again = client.get_job(job_id)
        assert (again.state, again.result, again.spec) == (done.state, done.result, done.spec)
