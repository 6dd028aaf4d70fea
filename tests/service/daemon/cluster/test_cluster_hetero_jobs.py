"""Heterogeneous (heterogeneous) jobs on two real daemons: R-GCN ranks on both nodes in one c10d
rendezvous, a heterogeneous producer per rank on each node, train ids (or a link job's train edges of the
target relation) sharded by global rank and the evaluation gathered over both nodes, each node
holding every row (replicated) or its share of each featured type's rows (partitioned)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cluster_nodes import final_job

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


@pytest.fixture(scope="module")
def hetero_toy(tmp_path_factory):
    """The toy heterogeneous graph (`examples/hetero_toy_ogb.py`, 400 papers, 120 authors) prepared as "toy", and
    as "toy-link" beside it with its paper-written_by-author edges split for link prediction."""
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
    from graphtier.service.prepared.edge_split import EdgeSplitSpec

    base = tmp_path_factory.mktemp("heterogeneous-toy")
    raw, root = base / "raw", base / "prepared"
    subprocess.run(
        [sys.executable, str(EXAMPLES / "hetero_toy_ogb.py"), str(raw), "--papers", "400", "--authors", "120"],
        check=True,
    )
    prepare_dataset(PrepareConfig(source=f"ogb:{raw}", name="toy", root=root))
    split = EdgeSplitSpec.parse("0.8,0.1,0.1", eval_negatives=2000, target_relation="paper-written_by-author")
    prepare_dataset(PrepareConfig(source=f"ogb:{raw}", name="toy-link", root=root, edge_split=split))
    return PreparedDataset(root / "toy")


def test_hetero_specs_take_several_nodes_and_refuse_what_hetero_batches_do_not_serve():
    spec = JobSpec(dataset="toy", model="hgt", relation_fanouts=["5", "5"], nproc_per_node=2, nnodes=3)
    assert spec.world_size == 6 and spec.multi_node
    values = spec.model_dump(exclude={"fanouts"})
    partitioned = JobSpec.model_validate({**values, "features": "partitioned", "task": "link"})
    assert partitioned.features == "partitioned" and partitioned.replicate == "10%"
    for change, why in (
        (
            {"device": "cuda"},
            r"device='cuda' is not supported \(heterogeneous batches are gathered into host slots only",
        ),
        ({"task": "link", "decoder": "mlp+cn"}, r"decoder 'mlp\+cn' is not supported"),
    ):
        with pytest.raises(ValueError, match=why):
            JobSpec.model_validate({**values, **change})


@pytest.mark.slow  # two daemons, a rendezvous and a job: more than the default run affords; the spec test runs
def test_two_node_hetero_jobs_train_rgcn_on_both_daemons(test_cluster, hetero_toy):
    """A node job with every row on both nodes, then a link job with each type's rows partitioned."""
    datasets = [hetero_toy.directory, hetero_toy.directory.parent / "toy-link"]
    a, b = test_cluster.add(datasets), test_cluster.add(datasets)
    test_cluster.start()
    spec = JobSpec(
        dataset="toy", model="rgcn", relation_fanouts=["5", "5"], batch_size=32, hidden=16, epochs=2, lr=0.05,
        nproc_per_node=1, nnodes=2,
    )  # fmt: skip
    with b.client() as client:
        job = client.submit_job(spec)
        final = final_job(client, job.job_id)
    assert final.state == JobState.SUCCEEDED, final.message
    assert [(n.node_rank, n.address, n.state) for n in final.nodes] == [
        (0, b.address, JobState.SUCCEEDED),
        (1, a.address, JobState.SUCCEEDED),
    ]
    assert sorted(r.rank for r in final.ranks) == [0, 1]
    p = final.progress  # 240 train papers over 2 ranks of 32: 4 steps an epoch, each node's rank its half
    assert p is not None and p.global_step == p.total_steps == 2 * p.steps_per_epoch
    assert final.result is not None and final.result.test_accuracy > 0.5, final.result  # 3 classes
    with a.client() as client:  # the member's part ran heterogeneous producers of its own daemon's copy
        part = client.get_job(final.nodes[1].job_id)
    assert part.state == JobState.SUCCEEDED and part.spec.model == "rgcn" and part.placement.node_rank == 1

    link = JobSpec(
        dataset="toy-link", task="link", model="rgcn", relation_fanouts=["5", "5"], batch_size=64, hidden=16,
        epochs=2, lr=0.02, nproc_per_node=1, nnodes=2, decoder="mlp", features="partitioned",
    )  # fmt: skip
    with a.client() as client:
        job = client.submit_job(link)
        final = final_job(client, job.job_id, what=f"link job {job.job_id} to end")
    assert final.state == JobState.SUCCEEDED, final.message
    assert [n.state for n in final.nodes] == [JobState.SUCCEEDED, JobState.SUCCEEDED]
    p = final.progress  # the relation's train edges sharded over the ranks of both nodes
    assert p is not None and p.global_step == p.total_steps == 2 * p.steps_per_epoch
    # each node holds the hottest tenth of the papers and half of the rest: the others came from its peer
    assert p.traffic.network.rows > 0 and p.traffic.host.rows > 0, p.traffic
    metrics = final.result.metrics
    assert {"val_auc", "test_auc", "test_mrr", "test_hits@50"} <= set(metrics)
    assert all(0.0 <= value <= 1.0 for value in metrics.values()), metrics
