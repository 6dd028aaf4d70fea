"""A running job keeps reading the dataset version it started with, also after the dataset is prepared
again: its ranks ask for the layout by job id (asking by name once swapped versions under a job)."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client.data_plane import DataPlaneClient


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_ranks_get_the_version_their_job_started_with(daemon_processes, small_rmat, tmp_path):
    root = tmp_path / "datasets"
    shutil.copytree(small_rmat.directory, root / "rmat12")
    daemon = daemon_processes(root)
    endpoints = daemon.start()
    with DataPlaneClient(endpoints.grpc_target) as client:
        spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=500, nproc_per_node=1)
        job_id = client.submit_job(spec).job_id
        deadline = time.monotonic() + 180
        while client.get_job(job_id).state != JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.3)
        started_with = client.dataset_layout("rmat12", job_id=job_id)
        manifest = root / "rmat12" / "manifest.json"
        changed = json.loads(manifest.read_text())  # `prepare --overwrite` with another damping: a new version
        changed["score"] = {**changed["score"], "damping": 0.5}
        manifest.write_text(json.dumps(changed))
        newest = client.dataset_layout("rmat12")
        assert newest.handle.colptr.name != started_with.handle.colptr.name  # a new job would get the new copy
        again = client.dataset_layout("rmat12", job_id=job_id)
        assert again == started_with  # ... the running job keeps its own, still mapped
        assert os.path.exists(f"/dev/shm/{again.handle.colptr.name}")
        assert client.get_job(job_id).state == JobState.RUNNING
        client.cancel_job(job_id, "test done")
