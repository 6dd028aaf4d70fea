"""A dataset whose labels prepare remapped to dense classes trains over those classes, and the job says
where the source's labels are."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_job_on_remapped_labels_trains_over_the_dense_classes_and_notes_it(daemon_processes, tmp_path):
    n = 600
    rng = np.random.default_rng(0)
    classes = rng.integers(0, 3, n)
    adj = sp.random(n, n, density=0.02, format="csr", random_state=1)
    features = np.eye(3, dtype=np.float32)[classes] + rng.normal(0, 0.5, (n, 3)).astype(np.float32)
    np.savez(
        tmp_path / "g.npz",
        adj_data=adj.data,
        adj_indices=adj.indices,
        adj_indptr=adj.indptr,
        adj_shape=adj.shape,
        attr_matrix=features,
        labels=np.array([0, 5, 1_000_000_000])[classes],
    )
    root = tmp_path / "datasets"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "dataset",
            "prepare",
            f"npz:{tmp_path}/g.npz",
            "--name",
            "sparse",
            "--out",
            str(root),
            "--default-split",  # the file has no split: accept the random one
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    endpoints = daemon_processes(root).start()
    spec = JobSpec(dataset="sparse", fanouts=[5, 5], batch_size=16, hidden=16, epochs=20, lr=0.01, nproc_per_node=1)
    with DaemonClient(endpoints.grpc_target) as client:
        submitted = client.submit_job(spec)
        deadline = time.monotonic() + 180
        while not client.get_job(submitted.job_id).state.final and time.monotonic() < deadline:
            time.sleep(0.3)
        job = client.get_job(submitted.job_id)
    assert job.state == JobState.SUCCEEDED, job.message
    assert job.result is not None and job.result.test_accuracy > 0.5  # 3 classes, separable features
    (note,) = [n for n in submitted.notes if "remapped" in n]
    assert "over 3 classes 0..2" in note and "class_labels" in note and "dataset inspect sparse --json" in note
