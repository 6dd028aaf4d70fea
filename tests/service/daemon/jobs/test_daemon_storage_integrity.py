"""Storage-tier rows changed in place during a job fail it naming the file and the block; never `succeeded`."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient


@pytest.mark.parametrize("storage_reads,window", [("mmap", 0), ("direct", 2)])
def test_features_overwritten_during_a_job_fail_it_naming_file_and_block(
    daemon_processes, small_rmat, tmp_path, storage_reads, window
):
    root = tmp_path / "datasets"
    shutil.copytree(small_rmat.directory, root / "rmat12")
    features = root / "rmat12" / "features.npy"
    if storage_reads == "direct":
        try:
            os.close(os.open(features, os.O_RDONLY | os.O_DIRECT))
        except OSError:
            pytest.skip("the dataset's filesystem does not support O_DIRECT")
    endpoints = daemon_processes(root).start()
    spec = JobSpec(
        dataset="rmat12",
        fanouts=[5, 5],
        batch_size=64,
        hidden=16,
        epochs=50,  # far longer than the test waits: it fails at the first batch read after the change
        nproc_per_node=1,
        budgets=BudgetSpec(host="0"),
        storage_reads=storage_reads,
        window=window,
    )
    with DaemonClient(endpoints.grpc_target) as client:
        job_id = client.submit_job(spec).job_id
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            job = client.get_job(job_id)
            if job.state.final or (job.progress is not None and job.progress.global_step > 0):
                break
            time.sleep(0.2)
        assert job.state == JobState.RUNNING, job
        data = np.load(features, mmap_mode="r+")  # every row rewritten in place: same file, same size
        data[:] = 0.5
        data.flush()
        del data
        while not client.get_job(job_id).state.final and time.monotonic() < deadline:
            time.sleep(0.3)
        job = client.get_job(job_id)
    assert job.state == JobState.FAILED, job
    assert str(features) in job.message and "block of rows [" in job.message, job.message
    assert "changed after it was prepared" in job.message and "Traceback" not in job.message
