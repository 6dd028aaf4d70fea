"""DatasetService over real gRPC on the Unix socket (daemon in this process, so tests can add jobs)."""

from __future__ import annotations

import os

import pytest

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.service.daemon.jobs.table import JobRecord

BUDGETS = BudgetSpec(num_devices=2, device_replicated="5%", device_interleaved="10%")


@pytest.fixture
def client(inproc_daemon):
    with DataPlaneClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        yield client


def _error(call, *args, **kwargs) -> DaemonRequestError:
    with pytest.raises(DaemonRequestError) as info:
        call(*args, **kwargs)
    return info.value


def test_one_copy_same_budgets_share_it_other_budgets_reload_it_when_no_job_uses_it(client, inproc_daemon, shm_of):
    first = client.load_dataset("rmat12", BUDGETS)
    assert first.layout == inproc_daemon.datasets.layout("rmat12")  # nothing lost on the wire
    segments = shm_of(os.getpid())
    assert not first.already_loaded and len(segments) == 7
    # "5%" and the byte count it stands for make the same plan: the same copy is returned.
    five_percent = str(first.layout.feature_bytes * 5 // 100)
    again = client.load_dataset("rmat12", BUDGETS.model_copy(update={"device_replicated": five_percent}))
    assert again.already_loaded and again.layout == first.layout
    assert shm_of(os.getpid()) == segments  # no second copy
    inproc_daemon.jobs.add(JobRecord(job_id="j1", dataset="rmat12", world_size=2, state=JobState.RUNNING))
    error = _error(client.load_dataset, "rmat12", BudgetSpec())
    assert error.code == "ALREADY_EXISTS"
    assert "'rmat12' is already loaded with another placement (budgets {'num_devices': 2, " in error.message
    assert "and job(s) j1 use it; every job shares one copy" in error.message
    assert "a copy no job uses is reloaded with the new budgets" in error.message
    assert shm_of(os.getpid()) == segments  # the copy the job reads is untouched
    inproc_daemon.jobs.set_state("j1", JobState.SUCCEEDED, "")
    reloaded = client.load_dataset("rmat12", BudgetSpec())  # no job uses it now: placed again
    assert not reloaded.already_loaded and reloaded.layout.handle.plan.replicated_end == 0
    assert shm_of(os.getpid()).isdisjoint(segments)  # the old copy's segments are gone, the new one's here
    resident = sum(os.stat(f"/dev/shm/{name}").st_size for name in shm_of(os.getpid()))
    assert client.unload_dataset("rmat12").released_bytes == resident
    assert not shm_of(os.getpid())


def test_unknown_dataset_names_it_and_the_root(client, inproc_daemon):
    error = _error(client.load_dataset, "nosuch")
    assert error.code == "NOT_FOUND"
    assert "'nosuch'" in error.message and str(inproc_daemon.config.dataset_root) in error.message
    for call in (client.dataset_layout, client.unload_dataset):
        error = _error(call, "rmat12")
        assert error.code == "NOT_FOUND" and "'rmat12' is not loaded" in error.message


@pytest.mark.parametrize(
    ("budgets", "expected"),
    [
        (BudgetSpec(num_devices=1, device_replicated="12XB"), "unknown unit 'XB'"),
        (BudgetSpec(device_replicated="10%"), "num_devices is 0"),
        (BudgetSpec(host="150%"), "more than 100%"),
    ],
)
def test_impossible_budgets_are_invalid_argument(client, budgets, expected, shm_of):
    error = _error(client.load_dataset, "rmat12", budgets)
    assert error.code == "INVALID_ARGUMENT" and expected in error.message
    assert not shm_of(os.getpid())


def test_bad_name_is_invalid_argument(client):
    error = _error(client.load_dataset, "../etc")
    assert error.code == "INVALID_ARGUMENT" and "invalid dataset name '../etc'" in error.message


def test_list_unload_and_jobs_holding_a_dataset(client, inproc_daemon, shm_of):
    (prepared,) = [d for d in client.list_datasets(include_prepared=True) if d.name == "rmat12"]
    assert not prepared.loaded and prepared.resident_bytes == 0 and prepared.source == "synthetic:rmat"
    assert client.list_datasets() == []
    client.load_dataset("rmat12")
    (loaded,) = client.list_datasets()
    resident = sum(os.stat(f"/dev/shm/{name}").st_size for name in shm_of(os.getpid()))
    assert loaded.loaded and loaded.resident_bytes == resident
    assert loaded.feature_bytes == 4096 * 16 * 4 and loaded.num_nodes == 4096

    inproc_daemon.jobs.add(JobRecord(job_id="j1", dataset="rmat12", world_size=2, state=JobState.RUNNING))
    assert client.list_datasets()[0].job_ids == ["j1"]
    error = _error(client.unload_dataset, "rmat12")
    assert error.code == "FAILED_PRECONDITION" and "used by job(s) j1" in error.message
    assert shm_of(os.getpid())  # still loaded

    result = client.unload_dataset("rmat12", force=True)
    assert result.released_bytes == resident and result.cancelled_job_ids == ["j1"]
    assert inproc_daemon.jobs.get("j1").cancel_requested
    assert not shm_of(os.getpid()) and client.list_datasets() == []
