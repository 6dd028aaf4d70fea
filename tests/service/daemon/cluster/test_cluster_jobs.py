"""Multi-node jobs on real daemons, real torchrun (one c10d rendezvous) and real gloo ranks, with
2 and 3 "nodes" on one machine: submit on any node, every node's part trains, cancel stops every
node, a lost node ends the job naming it (and why it could not restart), a node with another
dataset version is refused. A job restarted after a lost node: test_cluster_restart.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import psutil
import pytest
from cluster_nodes import PEER_TIMEOUT_S, final_job, wait_for

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.service.shm.naming import process_start_time


def _alive(pid: int) -> bool:
    return pid > 0 and process_start_time(pid) is not None


def _descendants(node) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(node.process.pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _job_processes(node) -> set[int]:
    """The node's daemon's descendants that were not there when it became ready (its forkserver
    and helpers were): the processes it started for jobs."""
    return _descendants(node) - node.baseline


def _live_segment_owners() -> set[int]:
    """Pids that own this test run's shared-memory segments and are still alive."""
    from graphtier.service.shm.naming import SegmentName, token_namespace

    owners = set()
    for name in os.listdir("/dev/shm"):
        segment = SegmentName.parse(name)
        if segment is not None and segment.token.startswith(token_namespace()) and _alive(segment.pid):
            owners.add(segment.pid)
    return owners


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_two_node_job_trains_on_both_daemons_with_one_rendezvous(test_cluster, small_rmat):
    a, b = test_cluster.add([small_rmat.directory]), test_cluster.add([small_rmat.directory])
    test_cluster.start()
    spec = JobSpec(
        dataset="rmat12",
        fanouts=[5, 5],
        batch_size=128,
        hidden=32,
        epochs=2,
        nproc_per_node=1,
        nnodes=2,
        budgets=BudgetSpec(host="40%"),
        storage_reads="page-cache",
        window=2,
    )
    with b.client() as client:  # submitted on the second node: it coordinates
        job = client.submit_job(spec)
        final = final_job(client, job.job_id)
    assert final.state == JobState.SUCCEEDED, final.message
    assert final.spec.nnodes == 2 and final.placement is not None and final.placement.node_rank == 0
    assert [(n.node_rank, n.address, n.state) for n in final.nodes] == [
        (0, b.address, JobState.SUCCEEDED),
        (1, a.address, JobState.SUCCEEDED),
    ]
    assert sorted(r.rank for r in final.ranks) == [0, 1]  # global ranks of both nodes
    assert final.result is not None and final.result.test_accuracy > 0
    p = final.progress
    assert p is not None and p.global_step == p.total_steps == 2 * p.steps_per_epoch
    # storage reads: each node's part reports its own (the member's over the wire), the whole job their sum
    storage = [n.progress.storage for n in final.nodes]
    assert all(s.mode == "page-cache" and s.window == 2 and s.read_rows > 0 and s.requests > 0 for s in storage)
    assert (p.storage.read_rows, p.storage.window_rows, p.storage.requests, p.storage.read_bytes) == (
        sum(s.read_rows for s in storage),
        sum(s.window_rows for s in storage),
        sum(s.requests for s in storage),
        sum(s.read_bytes for s in storage),
    )
    assert p.storage.rows == p.traffic.storage.rows  # every storage row counted once, on whichever node
    with a.client() as client:  # the member's part: a job of its own daemon, placed as node rank 1
        part = client.get_job(final.nodes[1].job_id)
    assert part.state == JobState.SUCCEEDED and part.placement.node_rank == 1
    assert part.placement.rdzv_endpoint == final.placement.rdzv_endpoint
    assert part.placement.rdzv_id == final.placement.rdzv_id and part.placement.coordinator == b.address
    # the c10d rendezvous, not the daemons, numbers the ranks (it orders the nodes by address): one each
    assert sorted([*(r.rank for r in part.ranks), *(r.rank for r in final.nodes[0].ranks)]) == [0, 1]
    for node in (a, b):
        assert not _job_processes(node), f"processes left on {node.address}"


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_cancel_on_the_coordinator_stops_every_node(test_cluster, small_rmat):
    nodes = [test_cluster.add([small_rmat.directory]) for _ in range(3)]
    test_cluster.start()
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=500, nproc_per_node=1, nnodes=3)
    with nodes[0].client() as client:
        job = client.submit_job(spec)
        wait_for(
            lambda: (lambda j: j.progress and j.progress.global_step > 3)(client.get_job(job.job_id)),
            120,
            "every node to train",
        )
        running = client.get_job(job.job_id)
        assert [n.state for n in running.nodes] == [JobState.RUNNING] * 3 and len(running.ranks) == 3
        cancelled = client.cancel_job(job.job_id, "test done")
    assert cancelled.state == JobState.CANCELLED
    for member, part in zip(nodes[1:], cancelled.nodes[1:], strict=True):
        with member.client() as client:
            assert client.get_job(part.job_id).state == JobState.CANCELLED
    for node in nodes:
        assert not _job_processes(node), f"processes left on {node.address}"


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_a_node_killed_mid_job_ends_it_naming_the_node_and_leaves_nothing(test_cluster, small_rmat):
    a, b = test_cluster.add([small_rmat.directory]), test_cluster.add([small_rmat.directory])
    test_cluster.start()
    spec = JobSpec(
        dataset="rmat12",
        fanouts=[5, 5],
        batch_size=64,
        hidden=16,
        epochs=500,
        nproc_per_node=1,
        nnodes=2,
        max_restarts=1,
    )
    with a.client() as client:
        job = client.submit_job(spec)
        wait_for(
            lambda: (lambda j: j.progress and j.progress.global_step > 3)(client.get_job(job.job_id)),
            120,
            "both nodes to train",
        )
        b.process.kill9()
        killed = time.monotonic()
        final = final_job(client, job.job_id, timeout=PEER_TIMEOUT_S + 60)
        took = time.monotonic() - killed
    print(f"peer killed -9: the job ended {took:.1f} s later (peer timeout {PEER_TIMEOUT_S:g} s): {final.message}")
    assert final.state == JobState.FAILED and final.message.startswith(f"node {b.address} was lost"), final.message
    # a restart needs 2 nodes: the job fails saying why it did not restart, and nothing was restarted
    assert final.message.endswith(
        f"not restarted: only {a.address} remains of its nodes, and a multi-node job needs at least 2"
    ), final.message
    assert final.restarts == 0 and final.spec.nnodes == 2
    assert took < PEER_TIMEOUT_S + 15, f"the job took {took:.0f} s to end after its peer died"
    wait_for(lambda: not _job_processes(a), 30, f"the job's processes on {a.address} to go")
    assert _live_segment_owners() <= {a.process.pid}  # the survivor's dataset only: no producer's slots left


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_node_with_another_dataset_version_or_none_is_refused_by_name(test_cluster, small_rmat):
    a, b = test_cluster.add([small_rmat.directory]), test_cluster.add([small_rmat.directory])
    manifest = b.dataset_root / "rmat12" / "manifest.json"
    changed = json.loads(manifest.read_text())
    changed["score"] = {**changed["score"], "damping": 0.5}  # prepared elsewhere with another damping
    manifest.write_text(json.dumps(changed))
    test_cluster.start()
    spec = JobSpec(
        dataset="rmat12",
        fanouts=[5],
        batch_size=64,
        hidden=16,
        epochs=1,
        nproc_per_node=1,
        nodes=[a.address, b.address],
    )
    with a.client() as client:
        with pytest.raises(DaemonRequestError, match=rf"node {b.address} has dataset 'rmat12' version [0-9a-f]{{16}}"):
            client.submit_job(spec)
        shutil.rmtree(b.dataset_root / "rmat12")
        with pytest.raises(DaemonRequestError, match=rf"node {b.address} has no prepared dataset 'rmat12': send it"):
            client.submit_job(spec)
        assert client.list_jobs() == []  # nothing was started


@pytest.mark.slow
def test_a_lost_coordinator_ends_the_members_part_within_the_timeout(test_cluster, small_rmat):
    a, b = test_cluster.add([small_rmat.directory]), test_cluster.add([small_rmat.directory])
    test_cluster.start()
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=500, nproc_per_node=1, nnodes=2)
    with a.client() as client:
        job = client.submit_job(spec)
        running = wait_for(
            lambda: (lambda j: j if j.progress and j.progress.global_step > 3 else None)(client.get_job(job.job_id)),
            120,
            "both nodes to train",
        )
    part_id = running.nodes[1].job_id
    a.process.kill9()
    killed = time.monotonic()
    with b.client() as client:
        final = final_job(client, part_id, timeout=PEER_TIMEOUT_S + 60)
    assert final.state == JobState.FAILED and a.address in final.message, final.message
    took = time.monotonic() - killed
    print(f"coordinator killed -9: the member's part ended {took:.1f} s later (peer timeout {PEER_TIMEOUT_S:g} s)")
    assert took < PEER_TIMEOUT_S + 15, f"the part took {took:.0f} s to end after its coordinator died"
    wait_for(lambda: not _job_processes(b), 30, f"the part's processes on {b.address} to go")
    assert _live_segment_owners() <= {b.process.pid}  # the survivor's dataset only: no producer's slots left


@pytest.mark.slow  # three daemons and a 3-node job: about 90 s on 2 cores
def test_a_lost_node_of_three_is_the_cause_not_the_healthy_nodes_gloo_errors(test_cluster, small_rmat):
    a, b, c = (test_cluster.add([small_rmat.directory]) for _ in range(3))
    test_cluster.start()
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=500, nproc_per_node=1, nnodes=3)
    with a.client() as client:
        job = client.submit_job(spec)
        wait_for(
            lambda: (lambda j: j.progress and j.progress.global_step > 3)(client.get_job(job.job_id)),
            180,
            "the three nodes to train",
        )
        c.process.kill9()
        final = final_job(client, job.job_id, timeout=PEER_TIMEOUT_S + 60)
    print(f"node 3 of 3 killed -9: {final.message}")
    assert final.state == JobState.FAILED
    # found by its silence: before the timeout when a healthy node's part fails first, else at it (a loaded machine)
    assert re.match(rf"node {c.address} was lost: its daemon (stopped answering|has not answered)", final.message), (
        final.message
    )
    assert not final.message.startswith(f"node {b.address}"), final.message
    wait_for(lambda: not _job_processes(a) and not _job_processes(b), 60, "the job's processes to go")
