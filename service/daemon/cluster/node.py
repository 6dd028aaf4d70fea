"""`ClusterNode`: this daemon as a member of a cluster -- its peers, its description, the
multi-node jobs it coordinates or takes part in, and datasets moved to and from it.

Made before gRPC starts and `bind()`-ed once the TCP listener has its address (port 0 is only
known then). A daemon without peers is a cluster of one: `cluster status` lists it alone and a
multi-node submit is refused saying how to add peers. Peers joined at run time (`cluster join`,
see joining.py) are kept in `joined_file` and read back at `bind()`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from graphtier.contract.cluster.models import ClusterView, NodeInfo, PushResult
from graphtier.contract.errors import InvalidRequestError
from graphtier.contract.identity import JobOwner
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.view import JobInfo, JobPlacementInfo
from graphtier.service.daemon.cluster.coordinator import CancelLocal, JobCoordinator, SubmitPart
from graphtier.service.daemon.cluster.dataset_transfer import DatasetReceiver, send_dataset
from graphtier.service.daemon.cluster.joining import JoinedPeers, admit, join
from graphtier.service.daemon.cluster.membership import Cluster
from graphtier.service.daemon.cluster.node_info import SelfDescription
from graphtier.service.daemon.cluster.settings import ClusterConfig

log = logging.getLogger("graphtierd")


class ClusterNode:
    """See the module docstring; `describe` builds this node's NodeInfo."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        dataset_root: Path,
        describe: Callable[[str, str], SelfDescription],
        submit_part: SubmitPart,
        cancel_local: CancelLocal,
        joined_file: Path,
    ) -> None:
        self.config, self.dataset_root = config, Path(dataset_root)
        self.joined = JoinedPeers(joined_file)
        self._describe, self._submit_part, self._cancel_local = describe, submit_part, cancel_local
        self.receiver = DatasetReceiver(self.dataset_root)
        self.cluster: Cluster | None = None
        self.coordinator: JobCoordinator | None = None
        self.describe_self: Callable[[], NodeInfo] = lambda: describe(config.node_name or "local", "")()

    def bind(self, address: str | None, *, token: str | None, trusted_pem: bytes | None) -> None:
        """Join the cluster as `address` (this daemon's TCP HOST:PORT; None = no TCP, no peers)."""
        advertised = self.config.advertise or address
        if advertised is None:
            return
        name = self.config.node_name or advertised
        self.describe_self = self._describe(name, advertised)
        self.cluster = Cluster(
            self.config,
            address=advertised,
            token=token or "",
            trusted_pem=trusted_pem,
            describe_self=self.describe_self,
            joined=self.joined.load(),
        )
        self.coordinator = JobCoordinator(
            self.cluster, self._submit_part, self._cancel_local, lambda dataset: self.dataset_root / dataset
        )
        if self.cluster.peers:
            log.info("cluster: this node is %s (%s); peers %s", name, advertised, ", ".join(self.cluster.peers))

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()

    def _joined(self, what: str) -> tuple[Cluster, JobCoordinator]:
        if self.cluster is None or self.coordinator is None or not self.cluster.peers and what != "part":
            raise InvalidRequestError(
                f"{what}: this daemon has no peers; start every node's daemon with --tcp HOST:PORT and "
                "--peer HOST:PORT (or --peers-file), or `graphtier cluster join HOST:PORT` another node, sharing one "
                "token file and TLS certificate"
            )
        return self.cluster, self.coordinator

    def view(self) -> ClusterView:
        return self.cluster.view() if self.cluster is not None else ClusterView(nodes=[self.describe_self()])

    def _listening(self, what: str) -> Cluster:
        if self.cluster is None:
            raise InvalidRequestError(
                f"{what}: this daemon has no TCP listener; peers reach each other over TCP: "
                "start it with --tcp HOST:PORT, a token file and a TLS certificate"
            )
        return self.cluster

    def join(self, address: str) -> ClusterView:
        """Joins the cluster of the daemon at `address` (`graphtier cluster join`)."""
        return join(self._listening(f"join {address!r}"), self.joined, address)

    def admit(self, address: str) -> ClusterView:
        """Admits the daemon at `address`, which is joining this one's cluster, as a peer."""
        return admit(self._listening(f"admit {address!r}"), self.joined, address)

    def submit(self, spec: JobSpec, owner: JobOwner) -> JobInfo:
        """A multi-node job coordinated by this daemon, owned by `owner`."""
        _, coordinator = self._joined(f"a job on {spec.nnodes} nodes")
        return coordinator.submit(spec, owner)

    def start_part(self, spec: JobSpec, placement: JobPlacementInfo, owner: JobOwner) -> JobInfo:
        _, coordinator = self._joined("part")
        return coordinator.start_part(spec, placement, owner)

    def push(self, name: str, node: str, *, replace: bool) -> PushResult:
        cluster, _ = self._joined(f"push {name!r} to {node!r}")
        target = next((p for p in cluster.peers.values() if node in (p.address, p.name)), None)
        if target is None:
            view = cluster.view()
            found = cluster.resolve(node, view)
            if found.is_self:
                raise InvalidRequestError(f"node {node!r} is this daemon itself: nothing to push")
            target = cluster.client(found.address)
        result = send_dataset(self.dataset_root, name, target, replace=replace)
        log.info(
            "pushed dataset %s (%d bytes) to %s in %.1f s%s",
            name,
            result.bytes,
            target.where,
            result.seconds,
            " (it had this version)" if result.unchanged else "",
        )
        return result
