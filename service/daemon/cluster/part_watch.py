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

A node behind a cut link does not refuse a call, it leaves it unanswered until the deadline (the
peer timeout): the nodes are asked at once, not one after another, and a node already found lost
is not asked again when the job ends, so a lost node ends the job within the peer timeout and a
poll, plus the time its processes take to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Protocol

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

    def finish(self, outcome: str, message: str) -> tuple[str, str]:
        """The job's part ended locally with (outcome, message): stop the other nodes' parts as
        needed and return the outcome and message the whole job ends with."""

    def decorate(self, info: JobInfo) -> JobInfo:
        """The local view of the job, completed with what is known of the other nodes."""


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

    def __init__(self, placement: JobPlacementInfo, me: str, address: str, timeout_s: float) -> None:
        self.placement, self.me, self.address, self.timeout_s = placement, me, address, timeout_s
        self.remotes: list[_Remote] = []
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

    def finish(self, outcome: str, message: str) -> tuple[str, str]:
        remotes = self._poll(force=True, skip_lost=outcome != "succeeded")
        if outcome == "succeeded":  # the other nodes' ranks finish with ours; give them the timeout to say so
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                if all(r.last is not None and r.last.state.final for r in remotes) or self._problem(remotes):
                    break
                time.sleep(0.5)
                remotes = self._poll(force=True)
            problem = self._problem(remotes)
            if problem:
                outcome, message = "failed", problem
        elif outcome == "failed":
            lost = self._unreachable(remotes)
            problem = self._problem(remotes) or (self._lost(lost) if lost is not None else None)
            if problem and problem not in message:
                message = f"{problem}; on {self.me}: {message}"
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
            info, nodes=nodes, ranks=ranks, progress=progress or info.progress, placement=self.placement, result=result
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

    def decorate(self, info: JobInfo) -> JobInfo:
        return replace(info, placement=self.placement)
