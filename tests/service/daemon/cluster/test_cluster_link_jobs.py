"""A link-prediction job over two "nodes" with partitioned features: real daemons, one c10d rendezvous,
gloo ranks on each node, the rows a node does not hold fetched from the other (slow: 16 s on an idle
2-core machine, 60-75 s under load)."""

from __future__ import annotations

import pytest
from cluster_nodes import final_job

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState


@pytest.mark.slow
def test_two_node_link_job_trains_and_evaluates_on_both_daemons(test_cluster, cora_link):
    a, b = test_cluster.add([cora_link.directory]), test_cluster.add([cora_link.directory])
    test_cluster.start()
    spec = JobSpec(
        dataset="cora-link", task="link", fanouts=[5, 5], batch_size=512, hidden=32, epochs=2, lr=0.01,
        dropout=0.0, nproc_per_node=1, nnodes=2, decoder="mlp+cn",
        features="partitioned", replicate="0.1",
    )  # fmt: skip
    with a.client() as client:
        job = client.submit_job(spec)
        final = final_job(client, job.job_id, 240, "the link job to end")
    assert final.state == JobState.SUCCEEDED, final.message
    assert [n.state for n in final.nodes] == [JobState.SUCCEEDED, JobState.SUCCEEDED]
    steps = 4488 // 2 // 512 + 1  # the train edges sharded over the 2 ranks of both nodes
    p = final.progress
    assert p.steps_per_epoch == steps and p.global_step == p.total_steps == 2 * steps
    assert p.traffic.network.rows > 0  # each node's producer fetched the rows the other holds
    metrics = final.result.metrics
    assert {"val_auc", "test_auc", "test_mrr", "test_hits@50"} <= set(metrics)
    assert metrics["test_auc"] > 0.6  # both nodes' gradients trained one model: beyond chance (0.5)
    with b.client() as client:  # the member's part: its own daemon's producer and rank
        part = client.get_job(final.nodes[1].job_id)
    assert part.state == JobState.SUCCEEDED and part.placement.node_rank == 1
    assert [r.global_step for r in part.ranks] == [2 * steps]  # its rank stepped every batch of its shard
