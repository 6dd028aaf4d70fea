"""A dataset whose source has no split trains only on a split someone chose: prepared without one
(no --split, fractions, seed or --default-split) it says so, and the daemon refuses jobs on it,
naming the ways to choose; accepted with --default-split, the same random split trains."""

from __future__ import annotations

import pytest

from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.client import DaemonClient
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset


def test_a_random_split_nobody_chose_is_refused_and_an_accepted_one_trains(inproc_daemon, shared_datasets):
    root = inproc_daemon.config.dataset_root
    source = f"npz:{shared_datasets / 'gnn_benchmark_npz' / 'cora.npz'}"
    for name, options in (("nosplit", {}), ("defaultsplit", {"default_split": True})):
        if not (root / name).exists():
            prepare_dataset(PrepareConfig(source=source, name=name, root=root, source_options=options))
    unchosen = PreparedDataset.open("nosplit", root).manifest
    assert unchosen.source_description["split"]["asked"] is False
    assert any("the source has no split" in note and "--default-split" in note for note in unchosen.notes)
    spec = {"fanouts": [5], "batch_size": 64, "hidden": 16, "epochs": 1}
    with DaemonClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        with pytest.raises(DaemonRequestError) as refused:
            client.submit_job(JobSpec(dataset="nosplit", **spec))
        assert refused.value.code == "INVALID_ARGUMENT"
        assert "dataset 'nosplit' has no split of its own" in refused.value.message
        assert "--split FILE" in refused.value.message and "--default-split" in refused.value.message
        job = client.submit_job(JobSpec(dataset="defaultsplit", **spec))
        client.cancel_job(job.job_id, "accepted: enough")
        assert client.list_jobs()[0].job_id == job.job_id
        for name in ("nosplit", "defaultsplit"):
            if any(d.name == name for d in client.list_datasets()):
                client.unload_dataset(name, force=True)
