"""`JobCoordinator`: a multi-node job, from the submit on any daemon to a part on every node.

The daemon the job is submitted to coordinates it: it picks the nodes (`nodes`, or itself and
its first `nnodes - 1` serving peers), checks that every one holds the job's dataset at the same
version (the sha256 of the manifest; a node without it, or with another version, is refused by
name), chooses the c10d rendezvous (an endpoint on its own address, a fresh id), starts its own
part as node rank 0 (its torchrun agent hosts the rendezvous store) and asks each peer to start
its part (StartJobPart). If a peer cannot, every part started so far is cancelled and the submit
fails naming the node. A peer's part checks the version again and watches the coordinator.
A job with `max_restarts` that fails is placed again on this node and the members that answer
(`CoordinatedParts.restart`, cluster/part_watch.py): the same steps with a fresh rendezvous.
"""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import Callable
from functools import partial
from pathlib import Path

from graphtier.contract.cluster.models import NodeInfo
from graphtier.contract.errors import DaemonError, InvalidRequestError, UnknownDatasetError
from graphtier.contract.identity import JobOwner
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.view import JobInfo, JobPlacementInfo
from graphtier.service.daemon.cluster.membership import Cluster
from graphtier.service.daemon.cluster.part_watch import CoordinatedParts, MemberPart, PartHooks
from graphtier.service.daemon.cluster.peer_client import PeerClient, PeerError
from graphtier.service.daemon.cluster.settings import format_address, parse_peer
from graphtier.service.prepared.digests import dataset_version

log = logging.getLogger("graphtierd")

# (spec, hooks) -> the local job; the job manager's submit with the part's supervision hooks
SubmitPart = Callable[[JobSpec, Callable[[str], PartHooks], JobOwner], JobInfo]
CancelLocal = Callable[[str, str], object]


def free_port(host: str) -> int:
    """A TCP port free on `host` now (for the rendezvous store the coordinator's torchrun hosts)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_dataset_versions(dataset: str, nodes: list[NodeInfo]) -> str:
    """The version of `dataset` every node holds (nodes[0] is this daemon); refused naming the
    first node without it or with another version."""
    me = nodes[0]
    mine = me.dataset(dataset)
    if mine is None:
        raise UnknownDatasetError(f"no prepared dataset {dataset!r} on this node ({me.describe()})")
    for node in nodes[1:]:
        theirs = node.dataset(dataset)
        if theirs is None:
            raise DaemonError(
                f"node {node.describe()} has no prepared dataset {dataset!r}: send it there with "
                f"`graphtier dataset push {dataset} --to {node.name}`"
            )
        if theirs.version != mine.version:
            raise DaemonError(
                f"node {node.describe()} has dataset {dataset!r} version {theirs.version[:16]} (its content's hash), "
                f"this node {me.describe()} version {mine.version[:16]}: a multi-node job trains on one version; "
                f"`graphtier dataset push {dataset} --to {node.name} --replace` sends this node's"
            )
    return mine.version


class JobCoordinator:
    """Starts multi-node jobs from this daemon and the parts peers ask it to run."""

    def __init__(
        self,
        cluster: Cluster,
        submit_part: SubmitPart,
        cancel_local: CancelLocal,
        dataset_root: Callable[[str], Path],
    ) -> None:
        self.cluster = cluster
        self._submit_part, self._cancel_local = submit_part, cancel_local
        self._dataset_dir = dataset_root

    @property
    def host(self) -> str:
        return parse_peer(self.cluster.address)[0]

    def _placements(self, addresses: list[str], version: str) -> Callable[[int, str], JobPlacementInfo]:
        """(node rank, coordinator's job id) -> that node's placement, for a job on the nodes at `addresses`
        (this daemon first) with a fresh c10d rendezvous hosted on this daemon's address."""
        rdzv = format_address(self.host, free_port(self.host))
        rdzv_id = f"graphtier-{secrets.token_hex(6)}"
        timeout_s = self.cluster.timeout_s

        def placement(node_rank: int, coordinator_job_id: str) -> JobPlacementInfo:
            return JobPlacementInfo(
                nnodes=len(addresses),
                node_rank=node_rank,
                rdzv_endpoint=rdzv,
                rdzv_id=rdzv_id,
                coordinator=self.cluster.address,
                coordinator_job_id=coordinator_job_id,
                local_addr=parse_peer(addresses[node_rank])[0],
                dataset_version=version,
                peer_timeout_s=timeout_s,
                node_addresses=list(addresses),
            )

        return placement

    def _start_members(
        self,
        spec: JobSpec,
        members: list[tuple[str, PeerClient]],
        placement: Callable[[int, str], JobPlacementInfo],
        watch: CoordinatedParts,
        owner: JobOwner,
    ) -> None:
        """Ask each member node (node ranks 1...) to start its part, owned by the job's `owner`; DaemonError
        naming the first that cannot."""
        coordinator_job_id = watch.placement.coordinator_job_id
        for node_rank, (name, peer) in enumerate(members, 1):
            try:
                part = peer.start_job_part(spec, placement(node_rank, coordinator_job_id), owner)
            except PeerError as exc:
                raise DaemonError(f"node {peer.where} could not start its part: {exc}") from None
            watch.add(node_rank, name, peer, part.job_id)
            log.info(
                "job %s: node %s (rank %d) runs its part as job %s there",
                coordinator_job_id,
                peer.where,
                node_rank,
                part.job_id,
            )

    def _replace_nodes(
        self,
        version: str,
        owner: JobOwner,
        spec: JobSpec,
        members: list[tuple[str, PeerClient]],
        coordinator_job_id: str,
    ) -> tuple[JobSpec, JobPlacementInfo, Callable[[CoordinatedParts], None]]:
        """A failed job's next placement: this daemon and `members` (see CoordinatedParts.restart)."""
        names = [self.cluster.name, *(name for name, _ in members)]
        spec = spec.model_copy(update={"nnodes": len(names), "nodes": names})
        placement = self._placements([self.cluster.address, *(peer.address for _, peer in members)], version)

        def start(watch: CoordinatedParts) -> None:
            self._start_members(spec, members, placement, watch, owner)

        return spec, placement(0, coordinator_job_id), start

    def submit(self, spec: JobSpec, owner: JobOwner) -> JobInfo:
        """Start a job spanning several nodes, owned by `owner` on each; returns the coordinator's view of it."""
        nodes = self.cluster.choose(spec.nnodes, list(spec.nodes))
        if len(nodes) < 2:
            raise InvalidRequestError(f"a multi-node job needs at least 2 nodes, got {len(nodes)}")
        version = check_dataset_versions(spec.dataset, nodes)
        spec = spec.model_copy(update={"nnodes": len(nodes), "nodes": [n.name for n in nodes]})
        placement = self._placements([n.address for n in nodes], version)
        parts: list[CoordinatedParts] = []

        def hooks(job_id: str) -> PartHooks:
            parts.append(
                CoordinatedParts(
                    placement(0, job_id),
                    self.cluster.name,
                    self.cluster.address,
                    self.cluster.timeout_s,
                    spec=spec,
                    replace_nodes=partial(self._replace_nodes, version, owner),
                )
            )
            return parts[0]

        local = self._submit_part(spec, hooks, owner)
        members = [(node.name, self.cluster.client(node.address)) for node in nodes[1:]]
        try:
            self._start_members(spec, members, placement, parts[0], owner)
        except DaemonError as exc:
            self._cancel_local(local.job_id, str(exc))  # its finish hook cancels the parts started so far
            raise DaemonError(f"multi-node job refused: {exc}") from None
        return local

    def start_part(self, spec: JobSpec, placement: JobPlacementInfo, owner: JobOwner) -> JobInfo:
        """This node's part of a job another daemon coordinates, owned by the job's `owner`."""
        if placement.node_rank == 0 or placement.node_rank >= placement.nnodes:
            raise InvalidRequestError(
                f"node rank {placement.node_rank} is not a member's rank in a job of {placement.nnodes} nodes"
            )
        version = dataset_version(self._dataset_dir(spec.dataset))
        if version is None:
            raise UnknownDatasetError(f"node {self.cluster.name} has no prepared dataset {spec.dataset!r}")
        if placement.dataset_version and version != placement.dataset_version:
            raise DaemonError(
                f"node {self.cluster.name} has dataset {spec.dataset!r} version {version[:16]}, the job "
                f"trains on version {placement.dataset_version[:16]}"
            )
        coordinator = self.cluster.client(placement.coordinator)
        return self._submit_part(
            spec, lambda job_id: MemberPart(placement, coordinator, placement.peer_timeout_s), owner
        )
