"""Supervision across nodes: each part of a multi-node job watches the others through their daemons.

The coordinating daemon (node rank 0) keeps a `CoordinatedParts`: every second it asks each peer
how its part is (GetJob); a part that failed or was cancelled there, or a node that has not
answered for `peer_timeout_s`, fails the whole job naming the node. A node whose daemon stops
answering is named first, even before the timeout, when another node's part (or this one's) fails
meanwhile: a lost node's ranks take the others' collectives down, and their gloo errors follow.
When its own part ends, every peer part still running is cancelled (`job cancel` on the coordinator stops every node). A
member daemon keeps a `MemberPart`: it watches the coordinator's job the same way, so a lost
coordinator ends the member's part within the timeout instead of leaving it waiting. Both plug
into the job manager's supervision as `PartHooks`.

A job with `max_restarts` is restarted instead of failing (`CoordinatedParts.restart`), at most that
many times: the coordinator names what was lost and how it was found, cancels every part still
running on a node that answers (and waits until its processes are gone), and starts the job again
on itself and those nodes -- a new rendezvous, nnodes and world size smaller by the nodes lost,
the same coordinator job. Its ranks agree on the newest checkpoint any of them holds (each node's
local rank 0 writes one into its own job directory; see `TrainSession.resume`), so the job goes on
from there. It does not restart, and fails naming the lost node and why, when its restarts are
used up, fewer than 2 nodes remain, or its features are partitioned across the nodes (a restart
does not move rows; a lost node's went with it); a lost coordinator ends every member's part as
before.

A node behind a cut link does not refuse a call, it leaves it unanswered until the deadline (the
peer timeout): the nodes are asked at once, not one after another, and a node already found lost
is not asked again when the job ends, so a lost node ends the job within the peer timeout and a
poll, plus the time its processes take to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.contract.jobs.view import JobInfo, JobNodeInfo, JobPlacementInfo, JobProgressInfo
from graphtier.service.daemon.cluster.peer_client import PeerClient, PeerError

log = logging.getLogger("graphtierd")

POLL_S = 1.0
CANCEL_GRACE_S = 60.0  # what a reachable node may take to stop its part's processes


class PartHooks(Protocol):
    """What the job manager calls while a part of a multi-node job runs."""

    placement: JobPlacementInfo

    def watch(self) -> str | None:
        """Called every supervision tick: a reason to fail the job now, or None."""

    def settle(self) -> str | None:
        """The job's part succeeded here: why the whole job did not succeed after all (another node's
        part failed, or its node was lost before its part was seen to end), else None."""

    def finish(self, outcome: str, message: str) -> tuple[str, str]:
        """The job's part ended locally with (outcome, message): stop the other nodes' parts as
        needed and return the outcome and message the whole job ends with."""

    def decorate(self, info: JobInfo) -> JobInfo:
        """The local view of the job, completed with what is known of the other nodes."""

    def restart(self, message: str, checkpoint_step: int | None) -> Relaunch | None:
        """The job failed here with `message`: its next placement if it is to restart (the newest
        checkpoint on this node is at `checkpoint_step`), else None."""


@dataclass(frozen=True)
class Relaunch:
    """A multi-node job's next placement after a failure, as its coordinating daemon decided it."""

    spec: JobSpec  # nnodes and nodes of the new placement: its world size
    placement: JobPlacementInfo  # the coordinator's own place in it
    nodes: str  # the nodes it runs on, for messages
    start_members: Callable[[], None]  # asks the other nodes to start their parts; DaemonError naming one that cannot
    announcement: str  # what was lost and how it was found, where the job restarts, from which step, which restart


# (the job's spec, the member nodes it restarts on as (name, client), the coordinator's job id) ->
# (the new spec, the coordinator's placement, a call that starts the members' parts and adds them to the watch)
Replace = Callable[
    [JobSpec, list[tuple[str, PeerClient]], str],
    tuple[JobSpec, JobPlacementInfo, Callable[["CoordinatedParts"], None]],
]


class _Remote:
    """One other node's part as last seen."""

    def __init__(self, node_rank: int, name: str, client: PeerClient) -> None:
        self.node_rank, self.name, self.client = node_rank, name, client
        self.job_id = ""
        self.last: JobInfo | None = None
        self.last_seen = time.monotonic()
        self.error = ""

    @property
    def where(self) -> str:
        return self.client.where

    def refresh(self) -> None:
        try:
            self.last = self.client.get_job(self.job_id)
            self.last_seen, self.error = time.monotonic(), ""
        except PeerError as exc:
            self.error = str(exc)

    def lost_for(self) -> float:
        return time.monotonic() - self.last_seen if self.error else 0.0


def _combined_progress(parts: list[JobProgressInfo]) -> JobProgressInfo | None:
    """Progress of the whole job: the slowest node's position, every node's throughput, traffic and storage
    reads summed."""
    if not parts:
        return None
    slowest = min(parts, key=lambda p: p.global_step)
    traffic, storage = parts[0].traffic, parts[0].storage
    for p in parts[1:]:
        traffic, storage = traffic + p.traffic, storage + p.storage
    return replace(
        slowest,
        loss=sum(p.loss for p in parts) / len(parts),
        train_accuracy=sum(p.train_accuracy for p in parts) / len(parts),
        batches_per_second=sum(p.batches_per_second for p in parts),
        traffic=traffic,
        storage=storage,
    )


class CoordinatedParts:
    """Node rank 0's view of every part of its job (see the module docstring)."""

    def __init__(
        self,
        placement: JobPlacementInfo,
        me: str,
        address: str,
        timeout_s: float,
        *,
        spec: JobSpec | None = None,
        replace_nodes: Replace | None = None,
    ) -> None:
        self.placement, self.me, self.address, self.timeout_s = placement, me, address, timeout_s
        self.spec, self._replace_nodes = spec, replace_nodes
        self.remotes: list[_Remote] = []
        self.restarts: list[str] = []  # each restart's announcement, oldest first
        self.not_restarted = ""  # why a failure did not restart the job
        self._lock = threading.Lock()
        self._polled = 0.0

    def add(self, node_rank: int, name: str, client: PeerClient, job_id: str) -> None:
        remote = _Remote(node_rank, name, client)
        remote.job_id = job_id
        with self._lock:
            self.remotes.append(remote)

    def _poll(self, force: bool = False, *, skip_lost: bool = False) -> list[_Remote]:
        with self._lock:
            remotes = list(self.remotes)
            due = force or time.monotonic() - self._polled >= POLL_S
            if due:
                self._polled = time.monotonic()
        asked = [r for r in remotes if not (skip_lost and r.error)] if due else []
        if len(asked) == 1:
            asked[0].refresh()
        elif asked:
            with ThreadPoolExecutor(max_workers=min(16, len(asked)), thread_name_prefix="graphtier-watch") as pool:
                list(pool.map(_Remote.refresh, asked))
        return remotes

    def _problem(self, remotes: list[_Remote]) -> str | None:
        """Why the job fails now, naming the node at fault: a node lost past the peer timeout; else a node
        whose part failed -- unless another node's daemon has stopped answering, which is then the cause
        (a lost node's ranks take the healthy nodes' collectives down with them: their gloo errors are
        the symptom, not the fault)."""
        for remote in remotes:
            if remote.lost_for() > self.timeout_s:
                return (
                    f"node {remote.where} was lost: its daemon has not answered for {remote.lost_for():.0f} s "
                    f"(peer timeout {self.timeout_s:g} s): {remote.error}"
                )
        for remote in remotes:
            job = remote.last
            if job is not None and job.state.final and job.state != JobState.SUCCEEDED:
                part = f"(job {remote.job_id} there) {job.state.value}: {job.message}"
                lost = self._unreachable(remotes)
                if lost is not None and lost is not remote:
                    return f"{self._lost(lost)}; then node {remote.where}'s part {part}"
                return f"node {remote.where}: its part {part}"
        return None

    @staticmethod
    def _unreachable(remotes: list[_Remote]) -> _Remote | None:
        """The node whose daemon stopped answering first, if any does not answer now."""
        silent = [r for r in remotes if r.error]
        return min(silent, key=lambda r: r.last_seen) if silent else None

    def _lost(self, remote: _Remote) -> str:
        return (
            f"node {remote.where} was lost: its daemon stopped answering {self.me} "
            f"{time.monotonic() - remote.last_seen:.0f} s ago ({remote.error})"
        )

    def watch(self) -> str | None:
        return self._problem(self._poll())

    def settle(self) -> str | None:
        """The other nodes' ranks finish with ours: they get the peer timeout to say so. A node lost
        meanwhile fails the job even though ours finished: what its ranks still had to do (their
        outputs, a script's own work after the last collective) went with it; a job with restarts left
        starts again from its newest checkpoint instead."""
        remotes = self._poll(force=True)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if all(r.last is not None and r.last.state.final for r in remotes) or self._problem(remotes):
                break
            time.sleep(0.5)
            remotes = self._poll(force=True)
        return self._problem(remotes)

    def finish(self, outcome: str, message: str) -> tuple[str, str]:
        if outcome == "succeeded":
            problem = self.settle()  # at once when the job's runner settled it already
            if problem:
                outcome, message = "failed", problem
        remotes = self._poll(force=True, skip_lost=outcome != "succeeded")
        if outcome == "failed":
            lost = self._unreachable(remotes)
            problem = self._problem(remotes) or (self._lost(lost) if lost is not None else None)
            named = lost is not None and message.startswith(f"node {lost.where} was lost")  # by the watch, seconds ago
            if problem and problem not in message and not named:
                message = f"{problem}; on {self.me}: {message}"
            if self.not_restarted:
                message = f"{message}; not restarted: {self.not_restarted}"
        running = [r for r in remotes if r.last is None or not r.last.state.final]
        reachable = [r for r in running if not r.error]  # an unreachable node's own watch ends its part
        for remote in running:
            if remote.error:
                log.warning(
                    "job %s: its part on %s is not cancelled from here (%s); that node ends it when it loses this one",
                    self.placement.coordinator_job_id,
                    remote.where,
                    remote.error,
                )
        if reachable:
            reason = f"the job ended on its coordinating node {self.me}: {outcome}"
            with ThreadPoolExecutor(max_workers=len(reachable), thread_name_prefix="graphtier-cancel") as pool:
                list(pool.map(lambda r: self._cancel(r, reason), reachable))
        return outcome, message

    def _cancel(self, remote: _Remote, reason: str) -> None:
        try:
            remote.last = remote.client.cancel_job(remote.job_id, reason, timeout_s=self.timeout_s + CANCEL_GRACE_S)
        except PeerError as exc:
            log.warning(
                "job %s: could not cancel its part on %s: %s", self.placement.coordinator_job_id, remote.where, exc
            )

    def restart(self, message: str, checkpoint_step: int | None) -> Relaunch | None:
        """Restart the job on this node and the others that answer, or None (with `not_restarted`
        saying why, unless the job asked for no restarts); see the module docstring."""
        spec = self.spec
        if spec is None or self._replace_nodes is None or spec.max_restarts == 0:
            return None
        remotes = self._poll(force=True)
        unreachable = self._unreachable(remotes)
        cause = (
            self._problem(remotes)
            or (self._lost(unreachable) if unreachable is not None else None)
            or f"the job failed on {self.me}: {message}"
        )
        lost = [r for r in remotes if r.error]
        if len(self.restarts) >= spec.max_restarts:
            self.not_restarted = f"its {spec.max_restarts} restart(s) are used up"
            return None
        if spec.features == "partitioned":  # each node serves the others its rows, by this placement's node list
            went = f": the rows on {', '.join(r.where for r in lost)} went with it" if lost else ""
            self.not_restarted = f"its features are partitioned across its nodes; a restart does not move them{went}"
            return None
        answering = [r for r in remotes if not r.error]
        running = [r for r in answering if r.last is None or not r.last.state.final]
        if running:  # nothing of the old placement may be left: each stops its part before the next starts
            reason = f"the job restarts: {cause}"
            with ThreadPoolExecutor(max_workers=len(running), thread_name_prefix="graphtier-cancel") as pool:
                list(pool.map(lambda r: self._cancel(r, reason), running))
        members = [r for r in answering if r.last is not None and r.last.state.final]  # a part still up: excluded
        if 1 + len(members) < 2:
            self.not_restarted = f"only {self.me} remains of its nodes, and a multi-node job needs at least 2"
            return None
        new_spec, placement, start = self._replace_nodes(
            spec, [(r.name, r.client) for r in members], self.placement.coordinator_job_id
        )
        nodes = ", ".join([self.me, *(r.name for r in members)])
        step = f"checkpoint step {checkpoint_step}" if checkpoint_step is not None else "step 0 (no checkpoint yet)"
        announcement = (
            f"{cause}; restart {len(self.restarts) + 1} of {spec.max_restarts}: the job starts again on "
            f"{len(members) + 1} nodes ({nodes}) from {step}"
        )
        with self._lock:
            self.restarts.append(announcement)
            self.remotes, self.placement, self.spec = [], placement, new_spec
        return Relaunch(new_spec, placement, nodes, lambda: start(self), announcement)

    def decorate(self, info: JobInfo) -> JobInfo:
        with self._lock:
            remotes = list(self.remotes)
        nodes = [
            JobNodeInfo(
                node=self.me,
                address=self.address,
                node_rank=0,
                job_id=info.job_id,
                state=info.state,
                message=info.message,
                progress=info.progress,
                ranks=list(info.ranks),
                log_path=info.log_path,
            )
        ]
        for remote in remotes:
            job = remote.last
            nodes.append(
                JobNodeInfo(
                    node=remote.name,
                    address=remote.client.address,
                    node_rank=remote.node_rank,
                    job_id=remote.job_id,
                    state=job.state if job else JobState.PENDING,
                    message=remote.error or (job.message if job else ""),
                    progress=job.progress if job else None,
                    ranks=list(job.ranks) if job else [],
                    log_path=job.log_path if job else "",
                )
            )
        progress = _combined_progress([n.progress for n in nodes if n.progress is not None])
        ranks = sorted((r for n in nodes for r in n.ranks), key=lambda r: r.rank)
        result = info.result or next((r.last.result for r in remotes if r.last is not None and r.last.result), None)
        return replace(
            info,
            nodes=nodes,
            ranks=ranks,
            progress=progress or info.progress,
            placement=self.placement,
            result=result,
            # the restart under way is already the job's message: it is not repeated as a note
            notes=[*info.notes, *(r for r in self.restarts if r != info.message)],
        )


class MemberPart:
    """A member node's watch over the coordinator of the job its part belongs to."""

    def __init__(self, placement: JobPlacementInfo, coordinator: PeerClient, timeout_s: float) -> None:
        self.placement, self.coordinator, self.timeout_s = placement, coordinator, timeout_s
        self.remote = _Remote(0, coordinator.name, coordinator)
        self.remote.job_id = placement.coordinator_job_id
        self._polled = 0.0

    def _problem(self) -> str | None:
        remote = self.remote
        if remote.lost_for() > self.timeout_s:
            return (
                f"the coordinating node {remote.where} was lost: its daemon has not answered for "
                f"{remote.lost_for():.0f} s (peer timeout {self.timeout_s:g} s): {remote.error}"
            )
        job = remote.last
        if job is not None and job.state.final and job.state != JobState.SUCCEEDED:
            return (
                f"the job ended on its coordinating node {remote.where} (job {remote.job_id}): "
                f"{job.state.value}: {job.message}"
            )
        return None

    def watch(self) -> str | None:
        if time.monotonic() - self._polled >= POLL_S:
            self._polled = time.monotonic()
            self.remote.refresh()
        return self._problem()

    def finish(self, outcome: str, message: str) -> tuple[str, str]:
        if outcome == "failed":
            if not self.remote.error:  # a coordinator already lost would keep this waiting for the timeout again
                self.remote.refresh()
            problem = self._problem() or (
                f"the coordinating node {self.remote.where} is unreachable: {self.remote.error}"
                if self.remote.error
                else None
            )
            if problem and problem not in message and f"coordinating node {self.remote.where} was lost" not in message:
                message = f"{problem}; here: {message}"
        return outcome, message

    def settle(self) -> str | None:
        return None  # the coordinating daemon settles the whole job

    def decorate(self, info: JobInfo) -> JobInfo:
        return replace(info, placement=self.placement)

    def restart(self, message: str, checkpoint_step: int | None) -> Relaunch | None:
        return None  # the coordinating daemon restarts the job, with a new part here
