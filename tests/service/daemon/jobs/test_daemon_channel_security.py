"""Only a job's own processes may open or release its channels, and the daemon never signals a
process that is not one of the job's ranks (a forged OpenChannel once made it SIGKILL any pid)."""

from __future__ import annotations

import subprocess
import time

import psutil
import pytest

from graphtier.contract.environment import JOB_TOKEN_ENV
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client.data_plane import DataPlaneClient


def test_forged_channel_calls_are_refused_and_no_foreign_process_is_signalled(
    daemon_processes, small_rmat, monkeypatch
):
    daemon = daemon_processes(small_rmat.directory.parent)
    endpoints = daemon.start()
    bystander = subprocess.Popen(["sleep", "600"])
    try:
        with DataPlaneClient(endpoints.grpc_target) as client:
            spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=500, nproc_per_node=1)
            job_id = client.submit_job(spec).job_id
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                job = client.get_job(job_id)
                if job.state == JobState.RUNNING and job.ranks and job.ranks[0].trainer_pid:
                    break
                time.sleep(0.3)
            rank_pid = client.get_job(job_id).ranks[0].trainer_pid
            producer_pid = client.get_job(job_id).ranks[0].producer_pid
            for pid in (rank_pid, producer_pid):  # job work yields to the daemon when cores are short
                assert psutil.Process(pid).nice() >= psutil.Process(daemon.pid).nice() + 5
            monkeypatch.delenv(JOB_TOKEN_ENV, raising=False)
            for call in (
                lambda: client.open_channel(job_id, 0, bystander.pid),
                lambda: client.release_channel(job_id, 0),
            ):
                with pytest.raises(DaemonRequestError, match="only the job's own processes may do that"):
                    call()
            # Even with the job's token (a same-user process can read it), a foreign pid is no rank of the job.
            monkeypatch.setenv(JOB_TOKEN_ENV, psutil.Process(rank_pid).environ()[JOB_TOKEN_ENV])
            with pytest.raises(DaemonRequestError, match=rf"trainer pid {bystander.pid} is not a rank of this job"):
                client.open_channel(job_id, 0, bystander.pid)
            assert client.get_job(job_id).state == JobState.RUNNING  # the forgery changed nothing
            client.cancel_job(job_id, "test done")
            deadline = time.monotonic() + 60
            while not client.get_job(job_id).state.final and time.monotonic() < deadline:
                time.sleep(0.2)
        assert bystander.poll() is None, "the daemon signalled a process that is not the job's"
    finally:
        bystander.kill()
        bystander.wait()
