"""GraphSAGE on Cora trained by two daemons (one rank each, one rendezvous) reaches the accuracy of
the same job on one daemon, within the noise of a seed (slow: two 30-epoch jobs)."""

from __future__ import annotations

import time

import pytest

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.service.prepared import PrepareConfig, prepare_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cora(shared_datasets, tmp_path_factory):
    root = tmp_path_factory.mktemp("cora")
    prepare_dataset(
        PrepareConfig(source=f"planetoid:{shared_datasets / 'planetoid_cora'}", name="cora", undirected=True, root=root)
    )
    return root / "cora"


def _run(client, spec) -> float:
    job = client.submit_job(spec)
    deadline = time.monotonic() + 600
    while not (final := client.get_job(job.job_id)).state.final:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert final.state == JobState.SUCCEEDED, final.message
    return final.result.test_accuracy


def test_two_node_graphsage_on_cora_matches_one_node(test_cluster, cora):
    a, _ = test_cluster.add([cora]), test_cluster.add([cora])
    test_cluster.start()
    spec = dict(
        dataset="cora",
        model="sage",
        fanouts=[25, 10],
        batch_size=64,
        hidden=256,
        epochs=30,
        lr=0.003,
        weight_decay=5e-4,
        nproc_per_node=1,
        seed=0,
    )
    with a.client() as client:
        one = _run(client, JobSpec(**spec))
        two = _run(client, JobSpec(**spec, nnodes=2))
    print(f"cora graphsage test accuracy: 1 node {one:.4f}, 2 nodes {two:.4f}")
    assert one >= 0.75 and two >= 0.75
    assert abs(two - one) <= 0.03, f"2 nodes {two:.4f} vs 1 node {one:.4f}"
