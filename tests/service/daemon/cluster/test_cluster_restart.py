"""A multi-node job with --max-restarts survives a lost node: kill -9 of a member's daemon in a
3-node job, and the job restarts on the 2 nodes that remain from its newest checkpoint and
succeeds; its events name the lost node, how it was found, the nodes and step it restarted on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cluster_nodes import PEER_TIMEOUT_S, wait_for
from test_cluster_jobs import _final, _job_processes, _live_segment_owners

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState

RESUMED = re.compile(r"resumed from ckpt-(\d{9})\.pt: epoch \d+, \d+ batches into it, step (\d+), 2 rank")


@pytest.mark.slow  # three daemons, a 3-node job and its restart on 2: about 60 s on 2 cores
def test_a_job_with_max_restarts_goes_on_from_its_checkpoint_on_the_nodes_that_remain(test_cluster, small_rmat):
    a, b, c = (test_cluster.add([small_rmat.directory]) for _ in range(3))
    test_cluster.start()
    spec = JobSpec(
        dataset="rmat12",
        fanouts=[5, 5],
        batch_size=64,
        hidden=16,
        epochs=4,
        nproc_per_node=1,
        nnodes=3,
        max_restarts=1,
        checkpoint_every_steps=2,
    )
    with a.client() as client:
        job = client.submit_job(spec)
        running = wait_for(
            lambda: (lambda j: j if j.progress and j.progress.global_step >= 0.4 * j.progress.total_steps else None)(
                client.get_job(job.job_id)
            ),
            180,
            "40% of the job on three nodes",
        )
        old_b_part = running.nodes[1].job_id
        c.process.kill9()
        final = _final(client, job.job_id, timeout=PEER_TIMEOUT_S + 180)
        changes = [e.state_change for e in client.job_events(job.job_id) if e.state_change is not None]
    assert final.state == JobState.SUCCEEDED, final.message
    assert final.restarts == 1 and final.spec.nnodes == 2
    assert [(n.address, n.state) for n in final.nodes] == [
        (a.address, JobState.SUCCEEDED),
        (b.address, JobState.SUCCEEDED),
    ]
    assert final.result is not None and final.result.test_accuracy > 0
    restarts = [s.message for s in changes if "restart 1 of 1" in s.message]
    assert len(restarts) == 1 and restarts[0] in final.notes, changes
    announced = restarts[0]
    print(f"node 3 of 3 killed -9 at step {running.progress.global_step}: {announced}")
    # found by its silence: the daemon refused calls (then the healthy nodes' gloo errors), or the peer timeout passed
    assert re.match(rf"node {c.address} was lost: its daemon (stopped answering|has not answered)", announced), (
        announced
    )
    assert f"starts again on 2 nodes ({a.address}, {b.address}) from checkpoint step " in announced, announced
    step = int(announced.rsplit("checkpoint step ", 1)[1])
    assert 0 < step <= running.progress.global_step + 2
    # rank 0 of the new placement resumed from the newest checkpoint the two nodes hold, not from step 0
    logs = Path(final.nodes[0].log_path).read_text() + Path(final.nodes[1].log_path).read_text()
    resumed = RESUMED.findall(logs)
    assert len(resumed) == 1 and int(resumed[0][1]) >= step > 0, logs[-3000:]
    with b.client() as client:  # the old placement's part there was stopped before the new one started
        assert client.get_job(old_b_part).state == JobState.CANCELLED
    wait_for(lambda: not _job_processes(a) and not _job_processes(b), 60, "the job's processes to go")
    assert _live_segment_owners() <= {a.process.pid, b.process.pid}  # datasets only: no producer's slots left
