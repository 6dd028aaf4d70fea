"""A multi-node job with --max-restarts survives a lost node: kill -9 of a member's daemon in a
3-node job, and the job restarts on the 2 nodes that remain from its newest checkpoint and
succeeds; its events name the lost node, how it was found, the nodes and step it restarted on.
The coordinator's decision itself (who is excluded, what is stopped, when it does not restart) is
checked without daemons too; test_cluster_jobs.py has a lost node of two, which cannot restart."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cluster_nodes import PEER_TIMEOUT_S, final_job, wait_for
from test_cluster_jobs import _job_processes, _live_segment_owners

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.contract.jobs.view import JobInfo, JobPlacementInfo
from graphtier.service.daemon.cluster.part_watch import CoordinatedParts, Relaunch
from graphtier.service.daemon.cluster.peer_client import PeerError
from graphtier.service.daemon.jobs.runner import JobRunner

RESUMED = re.compile(r"resumed from ckpt-(\d{9})\.pt: epoch \d+, \d+ batches into it, step (\d+), 2 rank")


@pytest.mark.slow  # three daemons, a 3-node job and its restart on 2: about 20 s on 2 idle cores
def test_a_job_with_max_restarts_goes_on_from_its_checkpoint_on_the_nodes_that_remain(test_cluster, small_rmat):
    a, b, c = (test_cluster.add([small_rmat.directory]) for _ in range(3))
    test_cluster.start()
    spec = JobSpec(
        dataset="rmat12",
        fanouts=[5, 5],
        batch_size=64,
        hidden=16,
        epochs=40,
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
        final = final_job(client, job.job_id, timeout=PEER_TIMEOUT_S + 180)
        changes = [e.state_change for e in client.job_events(job.job_id) if e.state_change is not None]
    assert final.state == JobState.SUCCEEDED, final.message
    assert final.restarts == 1 and final.spec.nnodes == 2, (final.message, final.notes)
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
    # the newest checkpoint when the node was lost: at or after the last one before the kill was seen (the
    # other ranks go on until their collectives fail), before the end (the job was cut short)
    assert running.progress.global_step - spec.checkpoint_every_steps <= step < running.progress.total_steps
    # rank 0 of the new placement resumed from the newest checkpoint the two nodes hold, not from step 0
    logs = Path(final.nodes[0].log_path).read_text() + Path(final.nodes[1].log_path).read_text()
    resumed = RESUMED.findall(logs)
    assert len(resumed) == 1 and int(resumed[0][1]) >= step > 0, logs[-3000:]
    with b.client() as client:  # the old placement's part there ended (its gloo error, or cancelled) before the next
        old, new = client.get_job(old_b_part), client.get_job(final.nodes[1].job_id)
    assert old.state in (JobState.FAILED, JobState.CANCELLED) and old.finished_at <= new.created_at, (old, new)
    wait_for(lambda: not _job_processes(a) and not _job_processes(b), 60, "the job's processes to go")
    assert _live_segment_owners() <= {a.process.pid, b.process.pid}  # datasets only: no producer's slots left


class _Peer:
    """A member's daemon as the coordinator's watch sees it: its part's state, or silence (lost)."""

    def __init__(self, address: str, state: JobState | None) -> None:
        self.address = self.name = self.where = address
        self.state, self.cancelled = state, ""

    def _job(self, job_id: str) -> JobInfo:
        spec = JobSpec(dataset="rmat12", fanouts=[5], nnodes=3)
        return JobInfo(job_id, spec, self.state, self.cancelled, datetime.now(timezone.utc))

    def get_job(self, job_id: str) -> JobInfo:
        if self.state is None:
            raise PeerError(f"node {self.address} is unreachable (Connection refused)")
        return self._job(job_id)

    def cancel_job(self, job_id: str, reason: str, *, timeout_s: float) -> JobInfo:
        self.state, self.cancelled = JobState.CANCELLED, reason
        return self._job(job_id)


def _watch(spec: JobSpec, peers: list[_Peer], placed: list, timeout_s: float = 6.0) -> CoordinatedParts:
    placement = JobPlacementInfo(
        nnodes=3,
        node_rank=0,
        rdzv_endpoint="127.0.0.1:1",
        rdzv_id="r",
        coordinator="127.0.0.1:9",
        coordinator_job_id="7",
        local_addr="127.0.0.1",
    )

    def replace_nodes(spec, members, job_id):
        placed.append([name for name, _ in members])
        new = placement.model_copy(update={"nnodes": 1 + len(members), "rdzv_id": f"r{len(placed)}"})
        return spec.model_copy(update={"nnodes": new.nnodes}), new, lambda watch: None

    watch = CoordinatedParts(placement, "127.0.0.1:9", "127.0.0.1:9", timeout_s, spec=spec, replace_nodes=replace_nodes)
    for rank, peer in enumerate(peers, 1):
        watch.add(rank, peer.name, peer, f"part{rank}")
    return watch


def test_the_restart_decision_excludes_the_lost_node_stops_the_old_parts_and_counts():
    """What the coordinator decides when a part fails (no daemons: the peers' answers are given)."""
    spec = JobSpec(dataset="rmat12", fanouts=[5], nnodes=3, max_restarts=1)
    healthy, lost = _Peer("127.0.0.2:9", JobState.RUNNING), _Peer("127.0.0.3:9", None)
    placed: list = []
    watch = _watch(spec, [healthy, lost], placed)
    relaunch = watch.restart("rank 0: gloo Connection reset by peer", 12)
    assert relaunch is not None and placed == [[healthy.address]] and relaunch.spec.nnodes == 2
    assert healthy.state == JobState.CANCELLED and healthy.cancelled.startswith("the job restarts: node 127.0.0.3")
    assert re.match(
        r"node 127\.0\.0\.3:9 was lost: its daemon stopped answering 127\.0\.0\.1:9 \d+ s ago", relaunch.announcement
    )
    assert relaunch.announcement.endswith(
        "restart 1 of 1: the job starts again on 2 nodes (127.0.0.1:9, 127.0.0.2:9) from checkpoint step 12"
    )
    assert watch.placement is relaunch.placement and watch.remotes == []  # the new parts are added as they start
    # while the restart is the job's message it is not repeated as a note; once the job moves on, it is kept
    now = datetime.now(timezone.utc)
    starting = JobInfo(job_id="7", spec=spec, state=JobState.STARTING, message=relaunch.announcement, created_at=now)
    assert watch.decorate(starting).notes == []
    running = JobInfo(job_id="7", spec=spec, state=JobState.RUNNING, message="", created_at=now, notes=["advice"])
    assert watch.decorate(running).notes == ["advice", relaunch.announcement]
    # the restarts are used up: the job fails naming the failure, then why it did not restart
    assert watch.restart("rank 1 died", 20) is None
    outcome, message = watch.finish("failed", "rank 1 died")
    assert outcome == "failed" and message.endswith("; not restarted: its 1 restart(s) are used up"), message
    # no restarts asked: today's failure, nothing added
    plain = _watch(spec.model_copy(update={"max_restarts": 0}), [_Peer("127.0.0.2:9", JobState.FAILED)], placed)
    assert plain.restart("rank 1 died", 20) is None and plain.not_restarted == ""
    # a cause the watch already gave, naming the lost node, is not given again with other seconds
    silent = _watch(spec.model_copy(update={"max_restarts": 0}), [_Peer("127.0.0.3:9", None)], placed)
    cause = "node 127.0.0.3:9 was lost: its daemon has not answered for 6 s (peer timeout 6 s): refused"
    assert silent.finish("failed", cause) == ("failed", cause)
    # partitioned features are not moved by a restart
    parted = _watch(
        spec.model_copy(update={"features": "partitioned"}), [_Peer("127.0.0.2:9", JobState.RUNNING), lost], placed
    )
    assert parted.restart("rank 1 died", 20) is None
    assert parted.not_restarted.endswith("a restart does not move them: the rows on 127.0.0.3:9 went with it")
    assert len(placed) == 1


def test_a_node_lost_after_the_coordinators_ranks_finished_fails_the_job_or_restarts_it():
    """The coordinator's ranks finished, but a member's node was lost before its part was seen to end:
    what its ranks still had to do went with it, so the job did not succeed; it restarts when it may."""
    spec = JobSpec(dataset="rmat12", fanouts=[5], nnodes=3, max_restarts=1)
    done, lost = _Peer("127.0.0.2:9", JobState.SUCCEEDED), _Peer("127.0.0.3:9", None)
    assert _watch(spec, [done, _Peer("127.0.0.3:9", JobState.SUCCEEDED)], []).settle() is None
    placed: list = []
    watch = _watch(spec, [done, lost], placed, timeout_s=0.5)
    problem = watch.settle()
    assert problem is not None and problem.startswith("node 127.0.0.3:9 was lost: its daemon has not answered"), problem
    relaunch = watch.restart(problem, 30)
    assert relaunch is not None and placed == [[done.address]]  # the member whose part succeeded takes part again
    assert relaunch.announcement.endswith(
        "the job starts again on 2 nodes (127.0.0.1:9, 127.0.0.2:9) from checkpoint step 30"
    )
    # with no restarts, the success here still ends FAILED, naming the lost node once
    plain = _watch(spec.model_copy(update={"max_restarts": 0}), [done, lost], [], timeout_s=0.5)
    outcome, message = plain.finish("succeeded", "")
    assert outcome == "failed" and message.startswith("node 127.0.0.3:9 was lost") and message.count("was lost") == 1


class _Supervised(JobRunner):
    """A runner without processes: each placement ends as `outcomes` says, in turn."""

    outcomes: list[tuple[str, str, int]]

    def _start(self) -> None:
        """Nothing to start: each placement's end is what `_supervise` reports."""

    def _supervise(self, tick):
        return self.outcomes.pop(0)

    def _stop_all(self) -> int | None:
        return 0

    def pump_logs(self) -> None:
        """No processes, so no logs to pump."""


def test_a_success_the_coordinator_cannot_settle_is_offered_to_the_restart(tmp_path):
    spec = JobSpec(dataset="rmat12", fanouts=[5], nnodes=3, max_restarts=1)
    runner = _Supervised("7", spec, None, tmp_path, tmp_path, lambda line: None)
    runner.outcomes = [("succeeded", "", 0), ("succeeded", "", 0)]
    problems = ["node 127.0.0.3:9 was lost: its daemon has not answered for 6 s", None]
    offered: list[str] = []

    def restart(message: str) -> Relaunch:
        offered.append(message)
        return Relaunch(spec, None, "127.0.0.1:9, 127.0.0.2:9", lambda: None, "node lost; restart 1 of 1")

    assert runner.run(lambda: None, restart, lambda: problems.pop(0)) == ("succeeded", "", 0)
    assert offered == ["node 127.0.0.3:9 was lost: its daemon has not answered for 6 s"] and runner.restarts == 1
    # without restarts the unsettled success is the job's failure
    runner = _Supervised("8", spec, None, tmp_path, tmp_path, lambda line: None)
    runner.outcomes = [("succeeded", "", 0)]
    assert runner.run(lambda: None, lambda message: None, lambda: "node lost") == ("failed", "node lost", 0)


def test_a_cancel_that_comes_while_the_restart_is_decided_ends_the_job_cancelled(tmp_path):
    spec = JobSpec(dataset="rmat12", fanouts=[5], nnodes=3, max_restarts=1)
    runner = _Supervised("7", spec, None, tmp_path, tmp_path, lambda line: None)
    runner.outcomes = [("failed", "rank 1 died", 1)]
    started: list = []

    def restart(message: str) -> Relaunch:
        runner.cancel("cancelled by the user")  # arrives while the next placement is being found
        return Relaunch(spec, None, "127.0.0.1:9, 127.0.0.2:9", lambda: started.append(1), "node lost; restart 1 of 1")

    outcome, message, _ = runner.run(lambda: None, restart)
    assert (outcome, message) == ("cancelled", "cancelled by the user")
    assert started == [] and runner.restarts == 0  # nothing was started again
